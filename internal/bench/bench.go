// Package bench holds the workloads of `pgadmit bench`: ten fixed definitions, W1..W5, which
// mirror the reference harness of the seed gateway, the gateway-shaped W6..W8, W9, which
// measures stranding, and T1, gateway requests run as tasks, which runs only when asked for; run
// by N concurrent workers against a migrated database through the public ratelimit API.
//
// Every run draws a random run id and puts it in every scope key it touches, so runs never
// disturb each other, or a database's other data.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Defaults of Config.
const (
	DefaultWorkers   = 16
	DefaultDuration  = 5 * time.Second
	ExactnessSeconds = 2 // W4 (each of its two parts) and W5 run this long, whatever Duration says
)

// Config says how to run the workloads.
type Config struct {
	// Workers is the number of concurrent workers, each with its own connection.
	Workers int
	// Instances is how many Limiters the workers are spread over, as that many gateway
	// instances sharing the database would be: worker w calls instance w mod Instances, and
	// each instance combines only its own workers' calls. Instances contend with each other on
	// the rows and scopes they share, as separate processes do. Zero means 1; at most Workers.
	Instances int
	// Duration is how long W1, W2, W3, W6, W7, W8 and T1 run, and W9 (4 s at least).
	Duration time.Duration
	// ExactnessDuration is how long W4 (each part) and W5 run; zero means ExactnessSeconds.
	ExactnessDuration time.Duration
	// Only lists the workload codes to run ("W1", "W4"...); empty runs them all but those
	// that run only when listed (Workload.OptIn: T1).
	Only []string
	// RunID goes into every scope key; empty draws a random one. The workloads' book
	// checks take its scopes to be empty when the run starts: a RunID used before in the
	// same database fails them.
	RunID string
	// Limiter options, e.g. ratelimit.WithoutCombining(); none: the defaults.
	Options []ratelimit.Option
	// Think is the mean pause between an admitted Reserve and its Commit, as a gateway waits
	// for its upstream call; each pause is drawn uniformly from zero to twice Think. Latency
	// percentiles leave the pause out, ops/s does not (a worker that waits admits less: raise
	// Workers with it). Zero: no pause, every worker calls back to back.
	Think time.Duration
	// Rounds is how many times the selected workloads run, one round after the other, in the
	// same database and with the same scope keys (nothing is reset in between), so that a
	// later round shows what a grown table costs; zero means 1.
	Rounds int
	// BeforeEach and AfterEach, when set, are called before and after each workload of each
	// round (round counts from 1), outside the measurement; an error stops the run.
	BeforeEach func(ctx context.Context, w Workload, round int) error
	AfterEach  func(ctx context.Context, r Result) error
	// Progress, when set, is called every ProgressEvery while a workload runs, from a
	// goroutine of its own (never once the workload has ended, nor at the same time as
	// another call), with how far the workload has got. A workload shorter than ProgressEvery
	// is not reported.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Grace bounds what a run that ctx ended gives back before Run returns: the grants its
	// workers hold (those in their Think pause, W4's admissions) and its Limiters' Local blocks
	// and give-backs (Limiter.Close). Zero means DefaultGrace. What a frozen server did not
	// take back within it stays held until a lease's TTL, a window's end or Recover ends it,
	// and Run's error then matches ErrLeftHeld.
	Grace time.Duration
}

// DefaultGrace is Config.Grace when zero: a live server takes back what a run held in
// milliseconds; a frozen one must not hold up a Ctrl-C for longer.
const DefaultGrace = grace.Default

// ErrLeftHeld is joined to Run's error when, after ctx ended, some of what the workers held
// was not given back within Config.Grace (the server did not answer): a lease's TTL, a
// window's end or Recover ends it. It is the demo's too.
var ErrLeftHeld = grace.ErrLeftHeld

// Workload describes one workload.
type Workload struct {
	Code        string // W1..W9, T1
	Name        string // starts with Code, e.g. "W1 window, many keys"
	Description string
}

// OptIn reports whether the workload runs only when Config.Only lists it: T1, so that the
// default run stays W1..W9, as measured and compared over the days, and writes no tasks.
func (w Workload) OptIn() bool { return w.Code == "T1" }

// runs reports whether cfg runs w.
func (c Config) runs(w Workload) bool {
	if len(c.Only) == 0 {
		return !w.OptIn()
	}
	return slices.Contains(c.Only, w.Code)
}

// Workloads returns the workloads, in order.
func Workloads() []Workload {
	return []Workload{
		{"W1", "W1 window, many keys", "reserve one window limit (requests, 60 s, limit never reached) on a key chosen at random from 10,000, then commit"},
		{"W2", "W2 gateway request", "reserve requests/min and tokens/min (estimate 500) on api_key:K (K of 1,000) and a concurrent limit of 1,000 on model:M (M of 5); commit actual tokens 420, which releases the lease"},
		{"W3", "W3 hot key", "W1 on one key"},
		{"W4", "W4 exactness", "one key with a limit of 100 in a window that cannot roll over, all workers reserve: exactly 100 admitted; then a concurrent limit of 10 with leases never released: exactly 10"},
		{"W5", "W5 opposite orders", "two window limits, half the workers list them in one order and half in the other; reserve and commit: no deadlock error (SQLSTATE 40P01)"},
		{"W6", "W6 gateway, shared model", "a gateway request: requests/min and tokens/min (estimate 500) on api_key:K (K of 1,000), tokens/min on the ONE provider model every request uses, and a concurrent limit of 1,000 on it; commit actual tokens 420"},
		{"W7", "W7 W6 with allotments", "W6 with the provider model's tokens/min admitted from local allotments (Limit.Local); the Limiter is closed at the end, returning its blocks, before its books are checked"},
		{"W8", "W8 hot key, allotment", "W3 with the limit admitted from a local allotment: no round trip"},
		{"W9", "W9 stranding", "one key with a limit of 2,000 per 2 s window, admitted from local allotments by at least 4 instances (fewer with fewer workers), far past it: once the blocks went back, no window admitted past the limit, and in every window that refused a request the units left unadmitted (stranded in blocks while requests were refused) are at most instances x 2 x 1/16 of the limit"},
		{"T1", "T1 gateway tasks", "a long gateway request run as a sync task: create it on api_key:K (K of 1,000) with a queue_size limit of 1,000, reserve W2's limits for its attempt, heartbeat it 3 times (with --think, a pause before each), commit actual tokens 420 and finish it; the row's latency is the whole task's, and its steps' latencies follow"},
	}
}

// ParseOnly parses a comma-separated list of workload codes (case-insensitive), such as
// "W1,w4", into canonical codes, refusing unknown ones.
func ParseOnly(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[string]bool{}
	for _, w := range Workloads() {
		known[w.Code] = true
	}
	var out []string
	for _, part := range strings.Split(s, ",") {
		code := strings.ToUpper(strings.TrimSpace(part))
		if !known[code] {
			var codes []string
			for _, w := range Workloads() {
				codes = append(codes, w.Code)
			}
			return nil, fmt.Errorf("unknown workload %q: want one of %s", strings.TrimSpace(part), strings.Join(codes, ", "))
		}
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	return out, nil
}

// Check is one exactness condition a workload verified.
type Check struct {
	Name string `json:"name"`
	Want int64  `json:"want"`
	Got  int64  `json:"got"`
	OK   bool   `json:"ok"`
	// AtMost says Want is a bound, not the value: Got may be below it.
	AtMost bool `json:"at_most,omitempty"`
}

// Step is the latency of one kind of call of a workload's operations.
type Step struct {
	Name  string `json:"name"` // "heartbeat"
	Calls int64  `json:"calls"`
	P50us int64  `json:"p50_us"`
	P99us int64  `json:"p99_us"`
}

// Result is what one workload measured. Its JSON names are those of the reference harness.
type Result struct {
	Name    string  `json:"name"`
	Workers int     `json:"workers"`
	Seconds float64 `json:"seconds"`
	Ops     int64   `json:"ops"` // admitted or refused; failed ones count in Errors only
	OpsPerS float64 `json:"ops_per_s"`
	P50us   int64   `json:"p50_us"`
	P99us   int64   `json:"p99_us"`
	// P50ns and P99ns are the same in nanoseconds: an admission from a
	// local allotment (W8) takes about a microsecond, which p50_us rounds
	// down, to 0 on a fast machine.
	P50ns     int64 `json:"p50_ns"`
	P99ns     int64 `json:"p99_ns"`
	Admitted  int64 `json:"admitted"`
	Rejected  int64 `json:"rejected"`
	Errors    int64 `json:"errors"`
	Deadlocks int64 `json:"deadlocks"`
	// ReservesPerStatement and SettlesPerStatement are how many Reserve and
	// Commit calls one statement carried on average (combining; 1 without).
	ReservesPerStatement float64 `json:"reserves_per_statement,omitempty"`
	SettlesPerStatement  float64 `json:"settles_per_statement,omitempty"`
	// ReserveStatementUs and SettleStatementUs are how long one such
	// statement took on average from send to answer, in microseconds;
	// ReserveBusyPercent and SettleBusyPercent the share of the run that
	// each instance had one in flight (statements in flight on average, in
	// percent, with more than one allowed: see ratelimit's CombinerStats).
	ReserveStatementUs float64 `json:"reserve_statement_us,omitempty"`
	SettleStatementUs  float64 `json:"settle_statement_us,omitempty"`
	ReserveBusyPercent float64 `json:"reserve_busy_percent,omitempty"`
	SettleBusyPercent  float64 `json:"settle_busy_percent,omitempty"`
	// HotPercent is the share of those statements, of both kinds, sent as
	// hot batches (two calls on one counter or concurrency scope: see ratelimit's CombinerStats).
	HotPercent float64 `json:"hot_percent,omitempty"`
	// LocalBlocks is how many blocks of Local limits (W7, W8, W9) the database
	// granted during the run, LocalFailures how many of their statements
	// failed: Local limits were then decided in the database, and a check
	// fails (see ratelimit's LocalStats). LocalInDatabase is how many Local
	// limits no block could serve, which the database decided: in W8 those
	// of a window's last moments (AllotmentOptions.Margin), in W9 most of
	// its refusals.
	LocalBlocks     int64 `json:"local_blocks,omitempty"`
	LocalFailures   int64 `json:"local_failures,omitempty"`
	LocalInDatabase int64 `json:"local_in_database,omitempty"`
	// FirstError is the message of the first error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Steps are the latencies of each kind of call of the operations (T1's: one operation
	// is several calls), of the calls that succeeded.
	Steps  []Step  `json:"steps,omitempty"`
	Checks []Check `json:"checks,omitempty"`
	// unreachable counts the Errors that did not reach the database (see Run's ErrUnreachable).
	unreachable int64
	// OK is false when an error occurred or a check failed.
	OK bool `json:"ok"`
	// Round is the round the result is of, from 1 (see Config.Rounds).
	Round int `json:"round"`
}

// Code returns the workload code that starts the result's name.
func (r Result) Code() string { code, _, _ := strings.Cut(r.Name, " "); return code }

// NewRunID returns a random run id of 8 hex digits.
func NewRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs the selected workloads one after the other on pool, cfg.Rounds times, calling
// cfg.BeforeEach before each, cfg.AfterEach and done after each, and returns their results, round by round.
// pool must allow at least cfg.Workers connections. It stops early, returning ctx's error, when
// ctx ends, along with the results of the workloads that finished; an error of a single operation
// is counted, not returned. It stops too, returning an error matching ErrUnreachable, after the
// first workload (reported to done) whose every operation failed to reach the database. Before
// it returns, it gives back what its workers hold and closes its Limiters, within cfg.Grace
// once ctx has ended.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, done func(Result)) ([]Result, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("bench: need at least one worker, got %d", cfg.Workers)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("bench: duration must be positive, got %s", cfg.Duration)
	}
	if cfg.Rounds < 0 {
		return nil, fmt.Errorf("bench: rounds must not be negative, got %d", cfg.Rounds)
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.ExactnessDuration <= 0 {
		cfg.ExactnessDuration = ExactnessSeconds * time.Second
	}
	if cfg.RunID == "" {
		cfg.RunID = NewRunID()
	}
	if cfg.Think < 0 {
		return nil, fmt.Errorf("bench: think time must not be negative, got %s", cfg.Think)
	}
	cfg.Instances = max(cfg.Instances, 1)
	if cfg.Instances > cfg.Workers {
		return nil, fmt.Errorf("bench: %d instances need at least as many workers, got %d", cfg.Instances, cfg.Workers)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	gr := grace.After(ctx, cfg.Grace)
	defer gr.End()
	r := &runner{cfg: cfg, pool: pool, prefix: "bench-" + cfg.RunID, paused: make([]time.Duration, cfg.Workers),
		counts: make([]opsCounter, cfg.Workers), grace: gr, reads: execModeDB{pool},
		books: map[scopeSet]holdings{}, unknownBooks: map[scopeSet]bool{}}
	r.lims = r.limiters()
	out, err := r.run(ctx, done)
	// Close waits for the give-backs of what a Reserve cut short by ctx granted: they would be
	// lost with the pool.
	r.grace.Close(r.lims...)
	if gr.LeftHeld() {
		err = errors.Join(err, ErrLeftHeld)
	}
	return out, err
}

// run runs the rounds of Run.
func (r *runner) run(ctx context.Context, done func(Result)) ([]Result, error) {
	cfg := r.cfg
	runs := map[string]func(context.Context) (Result, error){
		"W1": r.w1, "W2": r.w2, "W3": r.w3, "W4": r.w4, "W5": r.w5,
		"W6": r.w6, "W7": r.w7, "W8": r.w8, "W9": r.w9, "T1": r.t1,
	}
	var out []Result
	for round := 1; round <= cfg.Rounds; round++ {
		for _, w := range Workloads() {
			if !cfg.runs(w) {
				continue
			}
			if cfg.BeforeEach != nil {
				if err := cfg.BeforeEach(ctx, w, round); err != nil {
					return out, fmt.Errorf("before %s: %w", w.Name, err)
				}
			}
			stop := r.watch(w, round)
			r.round = round
			res, err := runs[w.Code](ctx)
			stop()
			if err != nil {
				return out, fmt.Errorf("%s: %w", w.Name, err)
			}
			res.Name = w.Name
			res.Round = round
			res.OK = res.Errors == 0
			for _, c := range res.Checks {
				res.OK = res.OK && c.OK
			}
			out = append(out, res)
			if cfg.AfterEach != nil {
				if err := cfg.AfterEach(ctx, res); err != nil {
					return out, fmt.Errorf("after %s: %w", w.Name, err)
				}
			}
			if done != nil {
				done(res)
			}
			if allUnreachable(res) {
				// The server is gone: the workloads left would fail alike, each for its
				// full duration (W4 and W5 too), before the run could say so.
				return out, fmt.Errorf("%s: %w, first: %s", w.Name, ErrUnreachable, res.FirstError)
			}
		}
	}
	return out, nil
}

type runner struct {
	cfg    Config
	pool   *pgxpool.Pool
	lims   []*ratelimit.Limiter // one per instance (Config.Instances)
	prefix string
	// paused is how long each worker's current operation paused (Config.Think); only the
	// worker itself touches its element.
	paused []time.Duration
	// counts are the workers' decided operations in the running workload, for Config.Progress.
	counts []opsCounter
	// keep is how many latencies each worker keeps (latencies); 0: maxLatencies over the workers.
	keep int
	// round is the round running, from 1.
	round int
	// grace bounds what the run gives back: it ends Config.Grace after Run's ctx, and notes
	// what it left held.
	grace *grace.Grace
	// reads is pool for the run's own reads of what the workloads left (execModeDB).
	reads db.DBTX
	// books are the holdings of the workloads' scope sets as last read, and unknownBooks
	// those that a workload whose operations failed left unknown (checkingBooks).
	books        map[scopeSet]holdings
	unknownBooks map[scopeSet]bool
}

// maxLatencies bounds the latencies a workload keeps, over all its workers (64 MiB): a default
// run of W8, which decides about a million operations a second, keeps every one; a longer one a
// uniform sample (--duration 1h kept billions, tens of GB, and sorted them).
const maxLatencies = 1 << 23

// latencies are one worker's latencies of its decided operations: every one up to keep of
// them, then a uniform sample of keep of them (reservoir sampling), each standing for
// ops/len(kept) operations.
type latencies struct {
	kept []time.Duration
	ops  int64 // latencies added
}

// add adds d, the latency of one more operation, keeping at most keep latencies.
func (l *latencies) add(d time.Duration, keep int, rng *mrand.Rand) {
	l.ops++
	if len(l.kept) < keep {
		l.kept = append(l.kept, d)
		return
	}
	if i := rng.Int64N(l.ops); i < int64(keep) {
		l.kept[i] = d
	}
}

// Never-reached limits: far above what any benchmark can admit in a window.
const (
	unlimitedRequests = 1e9
	unlimitedTokens   = 1e12
)

// key is the scope key name in this run; keyN is name followed by n (one of many keys).
func (r *runner) key(name string) string { return r.prefix + "-" + name }

func (r *runner) keyN(name string, n int) string { return r.prefix + "-" + name + strconv.Itoa(n) }

func (r *runner) w1(ctx context.Context) (Result, error) {
	return r.checkingBooks(ctx, limitBooks("api keys", requestsLimit(r.key("k"))), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, []ratelimit.Limit{requestsLimit(r.keyN("k", rng.IntN(10_000)))}, nil)
		})
	})
}

func (r *runner) w2(ctx context.Context) (Result, error) {
	return r.checkingBooks(ctx, r.requestBooks("k", "m"), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, r.requestLimits(rng, "k", "m"), gatewayActual)
		})
	})
}

// requestLimits are the limits of one W2 request (and of T1's task's): the requests/min and
// tokens/min of one of 1,000 API keys named key, and the concurrency of one of 5 models named
// model.
func (r *runner) requestLimits(rng *mrand.Rand, key, model string) []ratelimit.Limit {
	apiKey := ratelimit.Scope{Type: "api_key", Key: r.keyN(key, rng.IntN(1_000))}
	m := ratelimit.Scope{Type: "model", Key: r.keyN(model, rng.IntN(5))}
	return []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute},
		{Scope: m, Metric: ratelimit.MetricConcurrent, Limit: 1_000, Amount: 1},
	}
}

// requestBooks are the books of requestLimits' scopes: the API keys charged a request and its
// actual tokens each, the models' leases all given back.
func (r *runner) requestBooks(key, model string) []booked {
	return []booked{
		gatewayKeyBooks(r.key(key)),
		{label: "models", scopes: scopeSet{"model", r.key(model)}, leases: true},
	}
}

func (r *runner) w3(ctx context.Context) (Result, error) {
	limits := []ratelimit.Limit{requestsLimit(r.key("hot"))}
	return r.checkingBooks(ctx, limitBooks("api key", limits[0]), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, limits, nil)
		})
	})
}

func (r *runner) w5(ctx context.Context) (Result, error) {
	a, b := requestsLimit(r.key("w5-a")), requestsLimit(r.key("w5-b"))
	ab, ba := []ratelimit.Limit{a, b}, []ratelimit.Limit{b, a}
	// Both keys begin with "w5-": each admission charges a request to each.
	books := []booked{{label: "api keys", window: time.Minute, scopes: scopeSet{"api_key", r.key("w5-")}, charged: map[string]float64{ratelimit.MetricRequests: 2}}}
	res, err := r.checkingBooks(ctx, books, func() (Result, error) {
		return r.measure(ctx, r.cfg.ExactnessDuration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			if worker%2 == 0 {
				return r.reserveCommit(ctx, worker, rng, ab, nil)
			}
			return r.reserveCommit(ctx, worker, rng, ba, nil)
		})
	})
	res.Checks = append(res.Checks, Check{Name: "deadlock errors (SQLSTATE 40P01)", Want: 0, Got: res.Deadlocks, OK: res.Deadlocks == 0})
	return res, err
}

// limitBooks are the books of a workload whose admissions each take one
// window limit, limit, and commit its amount: those of the scopes of its
// type whose keys begin with its key (W1's limits are limit on keys that
// begin with it; W3's, W8's and W9's are limit itself). label names them.
func limitBooks(label string, limit ratelimit.Limit) []booked {
	return []booked{{label: label, window: limit.Window, scopes: scopeSet{limit.Scope.Type, limit.Scope.Key}, charged: map[string]float64{limit.Metric: limit.Amount}}}
}

// requestsLimit is W1's limit: requests in a 60 s window, never reached.
func requestsLimit(key string) ratelimit.Limit {
	return ratelimit.Limit{
		Scope:  ratelimit.Scope{Type: "api_key", Key: key},
		Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute,
	}
}

// errCommit marks an error of Commit after an admitted Reserve: the admission counts, the
// error too.
type errCommit struct{ err error }

func (e errCommit) Error() string { return "commit: " + e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }
func (errCommit) afterAdmission() {}

// afterAdmission is an error that came after an admitted Reserve (errCommit, errTaskStep):
// drive counts the admission, and the error too.
type afterAdmission interface {
	error
	afterAdmission()
}

// limiters returns one Limiter per instance, on the workers' pool.
func (r *runner) limiters() []*ratelimit.Limiter {
	return r.limitersN(r.cfg.Instances)
}

// limitersN is n new Limiters, as limiters makes them.
func (r *runner) limitersN(n int) []*ratelimit.Limiter {
	lims := make([]*ratelimit.Limiter, n)
	for i := range lims {
		lims[i] = ratelimit.New(r.pool, r.cfg.Options...)
	}
	return lims
}

// instance is the Limiter, among lims (one per instance), that worker calls.
func instance(lims []*ratelimit.Limiter, worker int) *ratelimit.Limiter {
	return lims[worker%len(lims)]
}

// reserveCommit reserves limits and commits the grant with actual amounts.
func (r *runner) reserveCommit(ctx context.Context, worker int, rng *mrand.Rand, limits []ratelimit.Limit, actual map[string]float64) error {
	return r.reserveCommitOn(ctx, r.lims, worker, rng, limits, actual)
}

// reserveCommitOn reserves limits on the worker's instance among lims, pauses
// for the think time, and commits the grant with actual amounts.
func (r *runner) reserveCommitOn(ctx context.Context, lims []*ratelimit.Limiter, worker int, rng *mrand.Rand, limits []ratelimit.Limit, actual map[string]float64) error {
	lim := instance(lims, worker)
	g, err := lim.Reserve(ctx, "", "", limits)
	if err != nil {
		return err
	}
	r.think(ctx, worker, rng)
	if ctx.Err() != nil {
		// Interrupted in the pause, as a gateway whose upstream call was cut off: the grant
		// goes back now, not at its lease's TTL or its window's end.
		_ = r.grace.Release(lim, g, reasonInterrupted)
		return ctx.Err()
	}
	if _, err := lim.Commit(ctx, g, actual); err != nil {
		if ctx.Err() != nil {
			// Interrupted mid-Commit, the grant settled or not: Release settles what is open.
			_ = r.grace.Release(lim, g, reasonInterrupted)
		}
		return errCommit{err}
	}
	return nil
}

// reasonInterrupted is recorded on what a worker held when the run was interrupted.
const reasonInterrupted = "bench interrupted"

// think pauses for one think time (Config.Think), as a gateway waits for its upstream call
// between Reserve and Commit, and records the pause for drive to leave out of the latency.
func (r *runner) think(ctx context.Context, worker int, rng *mrand.Rand) {
	if r.cfg.Think <= 0 {
		return
	}
	start := time.Now()
	t := time.NewTimer(time.Duration(rng.Int64N(2 * int64(r.cfg.Think))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	r.paused[worker] += time.Since(start)
}

// sample is what drive measured: counts and each worker's latencies.
type sample struct {
	res     Result
	lat     []latencies
	elapsed time.Duration
}

// measure drives op for d and summarizes it.
func (r *runner) measure(ctx context.Context, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (Result, error) {
	return r.measureWith(ctx, r.lims, d, op)
}

// measureWith drives op for d on lims (one Limiter per instance) and summarizes it.
func (r *runner) measureWith(ctx context.Context, lims []*ratelimit.Limiter, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (Result, error) {
	before := statsOf(lims)
	s, err := r.drive(ctx, d, op)
	if err != nil {
		return Result{}, err
	}
	res := summarize(s)
	after := statsOf(lims)
	reserves, settles := after.Reserve.Sub(before.Reserve), after.Settle.Sub(before.Settle)
	res.ReservesPerStatement = reserves.MeanBatch()
	res.SettlesPerStatement = settles.MeanBatch()
	res.ReserveStatementUs = microseconds(reserves.MeanStatement())
	res.SettleStatementUs = microseconds(settles.MeanStatement())
	streams := s.elapsed * time.Duration(len(lims))
	res.ReserveBusyPercent = percentOf(reserves.Busy, streams)
	res.SettleBusyPercent = percentOf(settles.Busy, streams)
	res.HotPercent = percentOf(reserves.Hot+settles.Hot, reserves.Batches+settles.Batches)
	res.LocalBlocks = after.Local.Granted - before.Local.Granted
	res.LocalFailures = after.Local.Failed - before.Local.Failed
	res.LocalInDatabase = after.Local.InDatabase - before.Local.InDatabase
	if res.LocalBlocks > 0 || res.LocalFailures > 0 {
		res.Checks = append(res.Checks, Check{Name: "failed statements of local blocks", Want: 0, Got: res.LocalFailures, OK: res.LocalFailures == 0})
	}
	return res, nil
}

// statsOf adds up the combining counts of lims, their blocks granted,
// block statements failed and Local limits decided in the database.
func statsOf(lims []*ratelimit.Limiter) ratelimit.Stats {
	var sum ratelimit.Stats
	for _, l := range lims {
		s := l.Stats()
		sum.Reserve = sum.Reserve.Add(s.Reserve)
		sum.Settle = sum.Settle.Add(s.Settle)
		sum.Local.Granted += s.Local.Granted
		sum.Local.Failed += s.Local.Failed
		sum.Local.InDatabase += s.Local.InDatabase
	}
	return sum
}

// percentOf is part over whole in percent (0 when whole is).
func percentOf[N ~int64](part, whole N) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// microseconds is d in microseconds, to a tenth.
func microseconds(d time.Duration) float64 {
	return math.Round(float64(d)/100) / 10
}

// drive runs op in a loop on every worker for d and measures it. An op returning nil is
// admitted; an *ExceededError is a refusal; anything else an error (and, with SQLSTATE 40P01,
// a deadlock), counted under Errors only: ops and latencies are those of admissions and
// refusals. Ops cut short because ctx ended are not counted.
func (r *runner) drive(ctx context.Context, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (sample, error) {
	type tally struct {
		ops, admitted, rejected, errors, deadlocks, unreachable int64
		firstErr                                                error
		lat                                                     latencies
	}
	tallies := make([]tally, r.cfg.Workers)
	keep := r.keep
	if keep <= 0 {
		keep = max(maxLatencies/r.cfg.Workers, 1)
	}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for w := range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[w]
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(start.UnixNano())))
			sampling := mrand.New(mrand.NewPCG(uint64(w)+1<<32, uint64(start.UnixNano()))) // the workload's draws stay op's own
			for ctx.Err() == nil && time.Now().Before(stop) {
				r.paused[w] = 0
				t0 := time.Now()
				err := op(ctx, w, rng)
				el := time.Since(t0) - r.paused[w]
				if ctx.Err() != nil {
					return
				}
				refused := errors.Is(err, ratelimit.ErrExceeded)
				if err == nil || refused { // decided: an operation of the measure
					t.ops++
					r.counts[w].Add(1)
					t.lat.add(el, keep, sampling)
				}
				var after afterAdmission
				switch {
				case err == nil:
					t.admitted++
				case refused:
					t.rejected++
				default:
					// Not an operation of the measure: one that failed (the database
					// down, say) may take microseconds, and would count as the fastest.
					if errors.As(err, &after) {
						t.admitted++
					}
					t.errors++
					if isDeadlock(err) {
						t.deadlocks++
					}
					if unreachable(err) {
						t.unreachable++
					}
					if t.firstErr == nil {
						t.firstErr = err
					}
				}
			}
		}()
	}
	wg.Wait()
	s := sample{elapsed: time.Since(start), res: Result{Workers: r.cfg.Workers}}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	for _, t := range tallies {
		s.res.Ops += t.ops
		s.res.Admitted += t.admitted
		s.res.Rejected += t.rejected
		s.res.Errors += t.errors
		s.res.Deadlocks += t.deadlocks
		s.res.unreachable += t.unreachable
		if t.firstErr != nil && s.res.FirstError == "" {
			s.res.FirstError = t.firstErr.Error()
		}
		s.lat = append(s.lat, t.lat)
	}
	return s, nil
}

// summarize adds up the measured parts of a workload into its result: counts, ops/s over the
// total time, and percentiles over the latencies of every operation (or a sample: latencies).
func summarize(parts ...sample) Result {
	var out Result
	var lat []latencies
	var elapsed time.Duration
	for _, p := range parts {
		out.Workers = p.res.Workers
		out.Ops += p.res.Ops
		out.Admitted += p.res.Admitted
		out.Rejected += p.res.Rejected
		out.Errors += p.res.Errors
		out.Deadlocks += p.res.Deadlocks
		out.unreachable += p.res.unreachable
		if out.FirstError == "" {
			out.FirstError = p.res.FirstError
		}
		lat = append(lat, p.lat...)
		elapsed += p.elapsed
	}
	out.Seconds = elapsed.Seconds()
	ps := percentiles(lat, 50, 99)
	p50, p99 := ps[0], ps[1]
	out.P50us, out.P99us = p50.Microseconds(), p99.Microseconds()
	out.P50ns, out.P99ns = p50.Nanoseconds(), p99.Nanoseconds()
	if elapsed > 0 {
		out.OpsPerS = float64(out.Ops) / elapsed.Seconds()
	}
	return out
}

// percentiles returns the nearest-rank p-th percentile, for each p of ps, of the latencies of
// groups' operations: the least latency that at least p % of them did not exceed. A group that
// kept a sample of its latencies weighs each by the operations it stands for (ops/len(kept)),
// so that a worker that decided more operations than another counts for more; when every group
// kept all of them, this is the nearest rank over them all. It sorts each group's latencies.
func percentiles(groups []latencies, ps ...int) []time.Duration {
	out := make([]time.Duration, len(ps))
	var all []time.Duration
	var ops int64
	for _, g := range groups {
		if len(g.kept) == 0 {
			continue
		}
		slices.Sort(g.kept)
		all = append(all, g.kept...)
		ops += g.ops
	}
	if len(all) == 0 {
		return out
	}
	slices.Sort(all)
	// within is how many operations took d or less, as the groups' latencies tell.
	within := func(d time.Duration) float64 {
		var n float64
		for _, g := range groups {
			if len(g.kept) == 0 {
				continue
			}
			k := sort.Search(len(g.kept), func(i int) bool { return g.kept[i] > d })
			n += float64(k) * float64(g.ops) / float64(len(g.kept))
		}
		return n
	}
	for j, p := range ps {
		rank := max((int64(p)*ops+99)/100, 1) // ceil(p/100 * ops)
		i := sort.Search(len(all), func(i int) bool { return within(all[i]) >= float64(rank) })
		out[j] = all[min(i, len(all)-1)] // past the end only by rounding: the largest
	}
	return out
}

// isDeadlock reports a PostgreSQL deadlock error (SQLSTATE 40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
