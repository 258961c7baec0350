// Package promadmit exports what pgadmit does as Prometheus metrics: the
// decisions of the HTTP middleware (package httpadmit), the latency of
// every database operation, the leases requests in flight hold, what
// Recover and Prune give back, which pgadmit the process runs
// (pgadmit_build_info), (NewCombiningCollector) how a Limiter
// combines concurrent calls into statements, and (NewPoolCollector) how
// busy the pgx pool it runs on is.
//
//	reg := prometheus.NewRegistry()
//	metrics, err := promadmit.New(reg)
//	if err != nil {
//		return err
//	}
//	// The Limiter's own counts, which alerts need (pgadmit_lost_total):
//	combining, err := promadmit.NewCombiningCollector(limiter)
//	if err != nil {
//		return err
//	}
//	// And its pool's: statements waiting for a connection.
//	poolStats, err := promadmit.NewPoolCollector(pool)
//	if err != nil {
//		return err
//	}
//	reg.MustRegister(combining, poolStats)
//	mw, err := httpadmit.New(limiter, limits, httpadmit.WithObserver(metrics))
//	if err != nil {
//		return err
//	}
//	http.Handle("/v1/chat/completions", mw(upstream))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	// on a schedule:
//	if _, err := metrics.Recover(ctx, ratelimit.NewMaintenance(pool)); err != nil {
//		log.Print(err)
//	}
//
// Labels never carry a scope key: only outcomes, modes, operations, and
// the scope types and metric names of the limits, which are configuration.
// As a guard against a LimitsFunc that builds scope types from request
// input, pairs of scope type and metric beyond WithMaxSeries are reported
// as "other" (Other); so are operations, outcomes and modes outside the
// values documented for them, whoever calls the Observer methods. A scope
// type or metric really named "other" is reported as "other_", apart from
// them ("other_" as "other__", and so on). A scope type or metric longer
// than ratelimit.MaxScopeBytes is cut to it.
//
// Some counters have every series from New on, at 0: every operation and
// result of pgadmit_db_operations_total, every outcome of
// pgadmit_http_requests_total, every kind of pgadmit_recovered_total and
// pgadmit_pruned_total. The other series
// appear with their first count (a result's histogram with its first call,
// an outcome of a pair with its first limit), and rate and increase, which
// need two samples of a series, never count what its first scrape holds: a
// process's first lease_lost, or a short outage's failed_closed. Alert on
// the counters from 0.
//
// pgadmit_http_admissions_total counts limits, pgadmit_http_requests_total
// requests: a request admitted on three limits counts three times in the
// first, once in the second.
package promadmit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Defaults of the options.
const (
	DefaultNearLimit = 0.8
	DefaultMaxSeries = 200
)

// Other replaces the scope type and metric of limits beyond WithMaxSeries,
// and operations, outcomes and modes outside their documented values. No
// real scope type or metric is reported as Other: one named "other" is
// "other_" (and one named "other" and n underscores has n+1).
const Other = "other"

// Results of a database operation, the result label of
// pgadmit_db_operation_duration_seconds.
const (
	ResultOK       = "ok"
	ResultExceeded = "exceeded" // a refusal: the database answered
	ResultTimeout  = "timeout"
	ResultError    = "error"
	ResultSkipped  = "skipped" // Recover or Prune found another process doing it
	// ResultLeaseLost: RenewLeases found a lease expired or released (its
	// slot may be someone else's now). The database answered: it is no
	// ResultError, which an alert on the database's health would page for.
	ResultLeaseLost = "lease_lost"
	// ResultUnknownGrant: the database knows no reservation or lease of the
	// grant (ratelimit.ErrUnknownGrant: pruned, or never written). It
	// answered: the caller holds a grant it lost, or has a bug. Through
	// httpadmit, also a Commit or Release that found a reservation of the
	// request's grant unknown (ratelimit.StatusUnknown), which ratelimit
	// reports in the Settlement, not as an error.
	ResultUnknownGrant = "unknown_grant"
	// ResultRejected: the call was refused for the caller's input or state,
	// by ratelimit or by a database that answered: invalid input, an
	// unknown or finished task or attempt, a stale execution token, an
	// operation out of lock order, no task to claim. A caller's bug, not
	// the database's health.
	ResultRejected = "rejected"
	// ResultLockWait: a Recover or Prune run left batches (and, after a
	// second wait in a step, the rest of that step), or could not take or
	// give up its lease, because another session held locks they needed
	// past WithMaintenanceLockTimeout (every error of the run a
	// *ratelimit.LockWaitError). The database
	// answered: a transaction left idle in transaction, or a migration,
	// holds the rows; not the database's health.
	ResultLockWait = "lock_wait"
	// ResultCanceled: the caller's context was cancelled (its client left,
	// or the process is shutting down) before the operation ended; not the
	// database's health. httpadmit detaches its statements from the
	// request's context, so through the middleware only a direct caller of
	// DatabaseCall, ObserveRecover or ObservePrune reports it.
	ResultCanceled = "canceled"
)

// Metrics is an httpadmit.Observer that keeps Prometheus metrics. It is
// safe for concurrent use. Make it with New: a zero or nil *Metrics
// observes nothing, and its Recover and Prune fail with a
// *ratelimit.ValidationError on "Metrics" without running.
type Metrics struct {
	nearLimit float64
	maxSeries int

	admissions *prometheus.CounterVec
	requests   *prometheus.CounterVec
	near       *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	calls      *prometheus.CounterVec
	leases     prometheus.Gauge
	recovered  *prometheus.CounterVec
	pruned     *prometheus.CounterVec
	build      prometheus.Gauge

	mu     sync.Mutex
	series map[[2]string]bool // scope type and metric pairs given labels of their own
}

var _ httpadmit.Observer = (*Metrics)(nil)

// Option configures Metrics.
type Option func(*Metrics)

// WithNearLimit sets the utilization from which an admission counts in
// pgadmit_http_near_limit_total (default DefaultNearLimit, 80%): one that
// left its limit at least that used, so that WithNearLimit(1) counts the
// admissions that filled their limit. A Local limit admitted from this
// process's block never counts: its decision did not read the window
// (httpadmit.LimitOutcome.Utilization is 0). A threshold outside (0, 1],
// NaN included, makes New fail with a *ratelimit.ValidationError on
// "WithNearLimit".
func WithNearLimit(threshold float64) Option {
	return func(m *Metrics) { m.nearLimit = threshold }
}

// WithMaxSeries bounds the distinct pairs of scope type and metric that get
// labels of their own (default DefaultMaxSeries); later ones are "other".
// An n below 1 makes New fail with a *ratelimit.ValidationError on
// "WithMaxSeries".
func WithMaxSeries(n int) Option {
	return func(m *Metrics) { m.maxSeries = n }
}

// New creates the metrics and registers them with reg, as one collector
// (reg.Unregister(metrics) removes them all); in braces, their labels:
//
//	pgadmit_http_admissions_total          limits of requests decided {outcome, mode, scope_type, metric}
//	pgadmit_http_requests_total            requests decided {outcome}
//	pgadmit_http_near_limit_total          admissions that left an enforced limit near full {scope_type, metric}
//	pgadmit_http_leases_held               leases held by requests in flight (a gauge)
//	pgadmit_db_operation_duration_seconds  database operations' durations (a histogram) {operation, result}
//	pgadmit_db_operations_total            the same operations counted {operation, result}
//	pgadmit_recovered_total                what Recover gave back {kind}
//	pgadmit_pruned_total                   what Prune released or deleted {kind}
//	pgadmit_build_info                     1: which pgadmit the process runs {version, goversion}
//
// pgadmit_db_operation_duration_seconds times each call whole, as its
// caller waited for it: a Reserve, Commit or Release call's time queued in
// the Limiter's combiner behind the statement in flight, and every
// operation's wait for a pool connection, count with the statement's.
// pgadmit_pool_empty_acquire_wait_seconds_total (NewPoolCollector) tells a
// pool too small from a slow database.
//
// pgadmit_build_info's version is that of pgadmit's module in the
// process's build (runtime/debug.ReadBuildInfo): "(devel)" built in
// pgadmit's tree, or with the module replaced by a directory; goversion
// is runtime.Version(). Join it on instance to tell which processes run
// which release (a rollout half done, say).
//
// A nil reg (a nil *prometheus.Registry in it too), or an option out of its
// range, is a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput) whose Field names it ("reg", "WithNearLimit",
// "WithMaxSeries").
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if nilRegisterer(reg) {
		return nil, invalidOption("New", "reg", nil, "must not be nil")
	}
	m := &Metrics{nearLimit: DefaultNearLimit, maxSeries: DefaultMaxSeries, series: map[[2]string]bool{}}
	for _, opt := range opts {
		if opt != nil { // a nil Option sets nothing
			opt(m)
		}
	}
	switch {
	case !(m.nearLimit > 0 && m.nearLimit <= 1):
		return nil, invalidOption("New", "WithNearLimit", m.nearLimit, "must be in (0, 1]")
	case m.maxSeries < 1:
		return nil, invalidOption("New", "WithMaxSeries", m.maxSeries, "must be at least 1")
	}
	m.admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_http_admissions_total",
		Help: "Limits of HTTP requests decided, by outcome (admitted, refused, shadow_refused, failed_open, failed_closed), mode (enforce, shadow), scope type and metric.",
	}, []string{"outcome", "mode", "scope_type", "metric"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_http_requests_total",
		Help: "HTTP requests whose decision reached a limit, by outcome: admitted (served on a decision: every enforced limit fit), refused (an enforced limit refused: a 429), failed_open (the database failed: served without a decision), failed_closed (the database failed: refused, a 503); every outcome from 0.",
	}, []string{"outcome"})
	// Every outcome from 0: a process's first 503 is the one an alert is for.
	for _, o := range requestOutcomes {
		m.requests.WithLabelValues(string(o))
	}
	m.near = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_http_near_limit_total",
		// One help whatever the threshold: a registry refuses two helps for
		// one name, as two Metrics told apart by labels would have.
		Help: "Admissions by an enforced limit that left it at least as used as the WithNearLimit threshold (default 0.8), by scope type and metric.",
	}, []string{"scope_type", "metric"})
	// Warm statements take milliseconds. A boundary sits at each of
	// httpadmit's default timeouts, so that a call cut off at one lands in
	// the bucket just past it, apart from every call that ended in time: a
	// decision at DefaultDecisionTimeout (.25), a settle or renewal at
	// DefaultSettleTimeout (2). Slow Recover and Prune runs land from 5 on.
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgadmit_db_operation_duration_seconds",
		Help:    "Duration of pgadmit's database operations (reserve, commit, release, renew_leases, recover, prune), by result (ok, exceeded, timeout, error, skipped, lease_lost, unknown_grant, rejected, lock_wait, canceled): each call whole, as its caller waited for it, a reserve's or settle's time in the combiner's queue behind the statement in flight and every operation's wait for a pool connection included.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2, 2.5, 5, 10, 30},
	}, []string{"operation", "result"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_db_operations_total",
		Help: "pgadmit's database operations (reserve, commit, release, renew_leases, recover, prune), by result, as pgadmit_db_operation_duration_seconds counts them, with every operation and result from 0.",
	}, []string{"operation", "result"})
	// Every operation and result from 0, as the kinds below: the
	// histogram's series of a result appear with its first call, which
	// increase over their _count never counts, and a rare result (a
	// renewal's lease_lost) may come once. 60 series, where the
	// histogram's would be 19 each (16 buckets, +Inf, _sum, _count): 1,140.
	for op := range operations {
		for _, r := range results {
			m.calls.WithLabelValues(op, r)
		}
	}
	m.leases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pgadmit_http_leases_held",
		Help: "Concurrency leases held by HTTP requests in flight in this process.",
	})
	m.recovered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_recovered_total",
		Help: "What Recover gave back, by kind (leases, reservations, failed_attempts, failed_tasks, requeued_tasks, poison_tasks, task_admissions, allotments).",
	}, []string{"kind"})
	m.pruned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgadmit_pruned_total",
		Help: "What Prune released or deleted, by kind (stale_reservations, counters, reservations, leases, allotments, events, tasks).",
	}, []string{"kind"})
	// Every kind from 0: a series that first appeared at n, after the run
	// that gave n back (a Recover at start-up, taking back what the
	// instance that died held), would have no earlier sample, and rate and
	// increase would never count those n.
	for kind := range recoveredKinds(ratelimit.RecoveryResult{}) {
		m.recovered.WithLabelValues(kind)
	}
	for kind := range prunedKinds(ratelimit.PruneResult{}) {
		m.pruned.WithLabelValues(kind)
	}
	m.build = newBuildInfo()
	// One Register: the registry checks every metric before it takes any,
	// so that a failure leaves nothing behind on reg.
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("promadmit: New: %w", err)
	}
	return m, nil
}

// nilRegisterer reports whether reg is nil, or a nil pointer in the
// interface (a *prometheus.Registry declared and never made), whose
// Register would panic.
func nilRegisterer(reg prometheus.Registerer) bool {
	if reg == nil {
		return true
	}
	v := reflect.ValueOf(reg)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Decided counts each limit's outcome, the request (requestOutcome), and
// the admissions that left an enforced limit near full. An outcome other than httpadmit's Outcome*
// constants, or a mode other than Enforce and Shadow, is counted as Other;
// scope type and metric pairs beyond WithMaxSeries are Other too, and a
// scope type or metric named "other" is "other_". Invalid UTF-8 in a scope
// type or metric is replaced by U+FFFD, and one longer than
// ratelimit.MaxScopeBytes (which ratelimit refuses as a limit) is cut to
// it. Nothing a caller
// passes makes more series than these bounds, or panics.
func (m *Metrics) Decided(outcomes []httpadmit.LimitOutcome) {
	if !m.made() || len(outcomes) == 0 {
		return
	}
	m.requests.WithLabelValues(requestOutcome(outcomes)).Inc()
	for _, o := range outcomes {
		scopeType, metric := m.labels(o.Limit.Scope.Type, o.Limit.Metric)
		m.admissions.WithLabelValues(outcomeLabel(o.Outcome), modeLabel(o.Limit.Mode), scopeType, metric).Inc()
		// At least the threshold, not above it: no admission leaves its
		// limit more than full, so WithNearLimit(1) would count none.
		if o.Outcome == httpadmit.OutcomeAdmitted && o.Limit.Mode == httpadmit.Enforce && o.Utilization >= m.nearLimit {
			m.near.WithLabelValues(scopeType, metric).Inc()
		}
	}
}

// DatabaseCall observes one operation's duration. An op other than
// httpadmit's Op* constants, OpRecover and OpPrune is counted as Other,
// so that no string a caller passes makes a series of its own. err gives
// the result label: ResultOK, ResultExceeded, ResultLeaseLost (a lost
// concurrency or maintenance lease), ResultUnknownGrant, ResultRejected
// (the caller's input or state: ratelimit.ErrInvalidInput, ErrUnknownTask,
// ErrTaskFinished, ErrNoTask, ErrStaleToken, ErrTaskNotQueued,
// ErrLockOrder), ResultTimeout
// (a context deadline, or a net.Error that timed out, a dial's included),
// ResultCanceled (a context.Canceled: the caller left), ResultLockWait
// (a Recover or Prune whose every error is a *ratelimit.LockWaitError) or
// ResultError (the rest: the database failed, refused the connection, or
// the deployment fails every call, as ErrIsolation and the pooler errors
// do). Of an err that holds several
// (Recover and Prune join their steps' errors), what ended the call wins:
// timeout, then canceled, then exceeded, lease_lost, unknown_grant, error
// (a part of err with no other class), rejected, and lock_wait last, so a
// run that a step left a row rejected in and that then met its deadline
// is timeout, and one that then lost its connection is error. The call is
// counted in pgadmit_db_operations_total too, whose series are all there
// from New on.
func (m *Metrics) DatabaseCall(op string, took time.Duration, err error) {
	if !m.made() {
		return
	}
	m.observeCall(operationLabel(op), result(err), took)
}

// LeasesHeld moves the gauge of leases held.
func (m *Metrics) LeasesHeld(delta int) {
	if m.made() {
		m.leases.Add(float64(delta))
	}
}

// made reports whether m was made by New: a zero or nil *Metrics has no
// metrics to observe into.
func (m *Metrics) made() bool { return m != nil && m.latency != nil }

// notMade is the error of Recover and Prune of m, not made by New: its
// Value says "Metrics{}" for a zero one, <nil> for a nil one.
func (m *Metrics) notMade(fn string) error {
	value := any("Metrics{}")
	if m == nil {
		value = nil
	}
	return invalidOption(fn, "Metrics", value, "not made with New")
}

// labels bounds the label values: the first WithMaxSeries pairs keep
// theirs (scopeLabel), the rest are Other.
func (m *Metrics) labels(scopeType, metric string) (string, string) {
	scopeType, metric = scopeLabel(scopeType), scopeLabel(metric)
	k := [2]string{scopeType, metric}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series[k] {
		return scopeType, metric
	}
	if len(m.series) >= m.maxSeries {
		return Other, Other
	}
	m.series[k] = true
	return scopeType, metric
}

// observeCall counts an operation's call, and records how long it took,
// by operation and result: a negative duration (a caller's wall clock
// stepped back) is 0, as the histogram's _sum must never decrease: PromQL
// would read a reset, a spike in rate(_sum).
func (m *Metrics) observeCall(op, result string, took time.Duration) {
	m.calls.WithLabelValues(op, result).Inc()
	m.latency.WithLabelValues(op, result).Observe(max(took, 0).Seconds())
}

// result is the result label of an operation's error. Each exported error
// of ratelimit has a class chosen for it (result_classes_test.go fails for
// one that has none): error and timeout are left for what an alert on the
// database's health should page for, a database or deployment that fails
// every call; the answers a healthy database gives a caller's call have
// classes of their own.
//
// An error can hold several classes (Recover and Prune join their steps'
// errors; a step cut off keeps what it left beside what cut it off): the
// first case of class that matches names it, so the order of its cases is
// the precedence. What ended the call comes first, timeout before canceled
// (a caller that left while the database did not answer in time is the
// database's trouble). error is a part that no class accounts for: a lost
// connection, which stops the run at once, or a server error a step ended
// with, which the run went on past (a statement timeout). Either is the
// database's trouble, which an alert on error must see, so it outranks
// rejected (a caller's bug) beside it. lock_wait needs every error to be
// one.
// TestResultPrecedence checks each pair.
func result(err error) string {
	c := class(err)
	if c == "" || (c == ResultRejected && unclassified(err)) {
		return ResultError
	}
	return c
}

// class is the class of err that ranks first, or "" for none: error.
func class(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case timedOut(err):
		return ResultTimeout
	case errors.Is(err, context.Canceled):
		return ResultCanceled
	case errors.Is(err, ratelimit.ErrExceeded):
		return ResultExceeded
	case errors.Is(err, ratelimit.ErrLeaseLost), errors.Is(err, ratelimit.ErrMaintenanceLeaseLost):
		return ResultLeaseLost
	case errors.Is(err, ratelimit.ErrUnknownGrant):
		return ResultUnknownGrant
	case errors.Is(err, ratelimit.ErrInvalidInput), errors.Is(err, ratelimit.ErrUnknownTask),
		errors.Is(err, ratelimit.ErrTaskFinished), errors.Is(err, ratelimit.ErrNoTask),
		errors.Is(err, ratelimit.ErrStaleToken), errors.Is(err, ratelimit.ErrTaskNotQueued),
		errors.Is(err, ratelimit.ErrLockOrder):
		return ResultRejected
	case ratelimit.OnlyLockWaits(err):
		return ResultLockWait
	}
	// ErrIsolation and the pooler errors too: a deployment that fails every
	// call is admission control down, as a database down is.
	return ""
}

// unclassified reports whether a part of err has no class: one of the
// errors joined (errors.Join, a step cut short) that holds none, as the
// lost connection that ended a run beside a row it left rejected. An error
// that wraps a class beside its cause, as ratelimit wraps ErrUnknownTask
// beside the server's 23503 ("%w (%s): %w"), is one part: a class that is
// one of the errors it wraps, not wrapped in them, names it whole.
func unclassified(err error) bool {
	if ratelimit.OnlyLockWaits(err) { // its own class, whatever error it wraps
		return false
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		parts := u.Unwrap()
		return !slices.ContainsFunc(parts, classLeaf) && slices.ContainsFunc(parts, unclassified)
	case interface{ Unwrap() error }:
		return unclassified(u.Unwrap())
	}
	return class(err) == ""
}

// classLeaf reports whether err has a class of its own and wraps nothing:
// a sentinel (ErrUnknownTask, context.Canceled) or an error type of ratelimit.
func classLeaf(err error) bool {
	switch err.(type) {
	case interface{ Unwrap() []error }, interface{ Unwrap() error }:
		return false
	}
	return err != nil && class(err) != ""
}

// timedOut reports whether err is a database that did not answer in time:
// a context deadline, or a net.Error that timed out (a dial or read past
// its deadline, which need not carry context.DeadlineExceeded).
func timedOut(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}

// invalidOption is fn's error for an argument, option or receiver it
// cannot run with: a *ratelimit.ValidationError naming it.
func invalidOption(fn, field string, value any, reason string) error {
	return oneprefix.Errorf("promadmit: %s: %w", fn, &ratelimit.ValidationError{Field: field, Value: value, Reason: reason})
}
