package httpadmit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/decimal"
	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// decision is what became of one request's limits.
type decision struct {
	grant      ratelimit.Grant
	failedOpen bool     // admitted without a decision: the database failed
	refusal    *Refusal // an enforced limit refused
	err        error    // for the error handler: bad limits, or failed closed
	outcomes   []LimitOutcome
}

// decide reserves the request's limits. Shadow limits are evaluated in the
// same Reserve call as the enforced ones, listed after them: Reserve names
// the first limit in the caller's order that did not fit, so a refusal
// naming a shadow limit means every enforced limit fit. That shadow limit
// is then counted and dropped, and Reserve runs again without it, so a
// request costs one round trip unless a shadow limit would refuse it (one
// more per such limit). Shadow limits are reserved and settled like the
// others: their counters see the traffic they would see if enforced.
//
// A shadow limit on the very counter of an enforced limit (same scope,
// metric and window: a lower limit being tried out) cannot be reserved a
// second time; it is judged from the enforced limit's decision (what the
// window held, plus this request), in the same round trip. When the
// enforced limit is Local and was admitted from this process's block, the
// window was not read: the shadow limit is reported admitted, with
// Utilization 0.
//
// The grant is in held as soon as Reserve returns it, before the Observer
// and the logger are called: the caller releases it if they panic.
func (m *middleware) decide(ctx context.Context, limits []Limit, held *ratelimit.Grant) decision {
	if err := checkLimits(limits); err != nil {
		return m.invalidLimits(ctx, err)
	}
	call, enforced, err := enforcedCall(limits) // sent to Reserve: enforced first, then shadow
	if errors.Is(err, ErrInvalidLimit) {
		return m.invalidLimits(ctx, err)
	}
	if err != nil {
		return decision{err: err}
	}
	if len(call) > ratelimit.MaxLimitsPerCall {
		// Reserve would refuse them whatever the request: how many limits
		// there are is the LimitsFunc's doing, not the client's.
		return m.invalidLimits(ctx, oneprefix.Errorf("%w: %w", ErrInvalidLimit, &ratelimit.ValidationError{Field: "Limits", Value: len(call),
			Reason: fmt.Sprintf("%d enforced limits with an amount, where Reserve takes at most %d", len(call), ratelimit.MaxLimitsPerCall)}))
	}
	var judged []Limit // shadow limits on an enforced limit's counter
	// at is the index in limits of each limit in call.
	at := make([]int, len(call), len(call)+len(limits))
	for j, l := range call {
		at[j] = enforced[keyOf(l.Limit)]
	}
	// Indexes in limits of the shadow limits set aside, or that would
	// refuse: the failure policy has no outcome to give them.
	skip := map[int]bool{}
	for i, l := range limits {
		if l.Mode != Shadow || l.Amount == 0 {
			continue
		}
		err := l.Limit.Validate()
		if err == nil {
			if _, ok := enforced[keyOf(l.Limit)]; ok {
				judged = append(judged, l)
				continue
			}
			err = refusedInCall(call, l)
		}
		if err != nil {
			// A shadow limit never refuses, so one that Reserve would
			// refuse as input is set aside (and logged) rather than
			// failing the request with a 400.
			m.logInvalidShadow(ctx, l, err)
			skip[i] = true
			continue
		}
		call = append(call, l)
		at = append(at, i)
	}
	if len(call) == 0 {
		return decision{}
	}
	// The statements below are detached from the request's context (a
	// Reserve cancelled midway may have been applied, and must be owned):
	// a request whose context already ended would be reserved, served on
	// a dead context and released, two round trips for nothing.
	if err := requestEnded(ctx); err != nil {
		return decision{err: err}
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.decisionTimeout)
	defer cancel()
	var d decision
	for {
		grant, err := m.reserve(ctx, call, held)
		var exceeded *ratelimit.ExceededError
		switch {
		case err == nil:
			d.grant = grant
			d.outcomes = append(d.outcomes, m.admittedOutcomes(ctx, call, judged, grant)...)
			return d
		case errors.As(err, &exceeded):
			i := indexOf(call, keyOfExceeded(exceeded))
			if i < 0 {
				return decision{err: refusalOfNoLimit(err)}
			}
			l := call[i]
			utilization := ratio(decimal.Of(exceeded.Projected), decimal.Of(exceeded.Limit))
			if l.Mode == Enforce {
				d.refusal = &Refusal{Exceeded: exceeded, Limit: l, Policy: policyNames(enforcedOf(limits))[keyOf(l.Limit)]}
				d.outcomes = append(d.outcomes, LimitOutcome{Limit: l, Outcome: OutcomeRefused, Utilization: utilization})
				return d
			}
			m.logShadow(ctx, l, utilization, exceeded.Message)
			d.outcomes = append(d.outcomes, LimitOutcome{Limit: l, Outcome: OutcomeShadowRefused, Utilization: utilization})
			skip[at[i]] = true
			call = append(call[:i:i], call[i+1:]...)
			at = append(at[:i:i], at[i+1:]...)
			if len(call) == 0 {
				// Nothing left to reserve: a Reserve of no limits would not
				// reach the database, yet be observed as a call that did.
				return d
			}
		case errors.Is(err, ratelimit.ErrInvalidInput):
			// Every limit of call was checked as Reserve checks it, and so
			// was their number: what Reserve still refuses is no fault of
			// the request's. The Limiter's own input (a nil pool) is the
			// configuration's, a 500; so is the call, which the middleware
			// built.
			if invalid := (*ratelimit.ValidationError)(nil); errors.As(err, &invalid) && strings.HasPrefix(invalid.Field, "Limits") {
				err = oneprefix.Errorf("%w: %w", ErrInvalidLimit, err)
			}
			return m.invalidLimits(ctx, err)
		default:
			// Not limits: the failure policy reports every limit but those
			// set aside, never decided (a scope type need not even be a
			// valid metric label), and the shadow limits found to refuse
			// before, which keep that outcome (they were logged so).
			f := m.failed(ctx, without(limits, skip), err)
			f.outcomes = append(d.outcomes, f.outcomes...)
			return f
		}
	}
}

// requestEnded is the error of a request whose context ended (ErrRequestEnded
// with the context's error and its cause), or nil.
func requestEnded(ctx context.Context) error {
	err := ctx.Err()
	switch cause := context.Cause(ctx); {
	case err == nil:
		return nil
	case cause != err:
		return fmt.Errorf("%w: %w (%w)", ErrRequestEnded, err, cause)
	}
	return fmt.Errorf("%w: %w", ErrRequestEnded, err)
}

// enforcedCall lists the enforced limits with an amount, the ones Reserve
// decides first, and their counters, having checked them as Reserve would.
// A limit Reserve refuses is named by its index in limits, where the
// caller wrote it, and blamed on what set the field it refuses (blame); Reserve would name it by its index in the call, past
// the limits left out of it (shadow ones, zero amounts). An enforced limit
// with a zero amount is checked too, as Reserve checks it before skipping
// it: invalid, it would otherwise reach the headers (a negative quota, a
// policy named twice).
func enforcedCall(limits []Limit) ([]Limit, map[key]int, error) {
	var call []Limit
	enforced := map[key]int{} // index in limits, of the limits in call
	seen := map[key]int{}     // of every enforced limit
	for i, l := range limits {
		if l.Mode != Enforce {
			continue
		}
		if err := l.Limit.Validate(); err != nil {
			return nil, nil, blame(inLimit(i, err), err)
		}
		k := keyOf(l.Limit)
		if j, dup := seen[k]; dup {
			// Keys taken from the request (a header's and the body's)
			// may make two limits of the configuration one counter.
			return nil, nil, oneprefix.Errorf("%w: %w", ErrBadRequest, inLimit(i, &ratelimit.ValidationError{Value: k.String(),
				Reason: fmt.Sprintf("same scope, metric and window as Limits[%d]", j)}))
		}
		seen[k] = i
		if l.Amount == 0 {
			continue // Reserve skips it: nothing to reserve
		}
		enforced[k] = i
		call = append(call, l)
	}
	return call, enforced, nil
}

// blame marks err, a limit that Validate refused (invalid), as the
// request's fault (ErrBadRequest: a 400) when the field it refuses is one
// a LimitsFunc takes from the request: the estimate (Amount, from the
// body's max_tokens say) or the scope key (Scope.Key, an API key from a
// header). Every other field (the quota, the metric, the scope type, the
// window, the lease TTL, Local) is the configuration's, whatever the
// request: ErrInvalidLimit, a 500.
func blame(err, invalid error) error {
	var v *ratelimit.ValidationError
	if errors.As(invalid, &v) && (v.Field == "Amount" || v.Field == "Scope.Key") {
		return oneprefix.Errorf("%w: %w", ErrBadRequest, err)
	}
	return oneprefix.Errorf("%w: %w", ErrInvalidLimit, err)
}

// inLimit is a *ratelimit.ValidationError about a field of one limit
// ("Amount") named as a field of the limit at index i ("Limits[2].Amount").
func inLimit(i int, err error) error {
	var invalid *ratelimit.ValidationError
	if !errors.As(err, &invalid) {
		return err
	}
	field := fmt.Sprintf("Limits[%d]", i)
	if invalid.Field != "" {
		field += "." + invalid.Field
	}
	return &ratelimit.ValidationError{Field: field, Value: invalid.Value, Reason: invalid.Reason}
}

// refusalOfNoLimit is the error of a Reserve whose refusal, err (a
// *ratelimit.ExceededError, however wrapped), names a limit the request
// did not send.
func refusalOfNoLimit(err error) error {
	return oneprefix.Errorf("httpadmit: refusal names no limit of the request: %w", err)
}

// reserve is one Reserve call, timed. A grant is put in held before the
// Observer is told of the call.
func (m *middleware) reserve(ctx context.Context, limits []Limit, held *ratelimit.Grant) (ratelimit.Grant, error) {
	rl := make([]ratelimit.Limit, len(limits))
	for i, l := range limits {
		rl[i] = l.Limit
	}
	start := time.Now()
	grant, err := m.limiter.Reserve(ctx, "", "", rl)
	if err == nil {
		*held = grant
	}
	switch {
	case errors.Is(err, ratelimit.ErrInvalidInput): // refused before reaching the database
	case err == nil && !inDatabase(grant): // admitted from local blocks, in memory
	default:
		m.observer.DatabaseCall(OpReserve, time.Since(start), err)
	}
	return grant, err
}

// inDatabase reports whether the database holds part of g: a reservation
// not taken from a local block, or a lease. A grant of Local reservations
// only was reserved in this process's memory, and is settled there.
func inDatabase(g ratelimit.Grant) bool {
	if len(g.Leases) > 0 {
		return true
	}
	for _, r := range g.Reservations {
		if !r.Local {
			return true
		}
	}
	return false
}

// admittedOutcomes reports every limit of an admitted request: those in
// the grant from what Reserve saw, and the judged shadow limits from the
// decision of the enforced limit on their counter.
func (m *middleware) admittedOutcomes(ctx context.Context, call, judged []Limit, grant ratelimit.Grant) []LimitOutcome {
	states := grantStates(grant)
	out := make([]LimitOutcome, 0, len(call)+len(judged))
	for _, l := range call {
		st := states[keyOf(l.Limit)]
		quota := decimal.Of(st.quota)
		out = append(out, LimitOutcome{Limit: l, Outcome: OutcomeAdmitted, Utilization: ratio(quota.Minus(st.remaining), quota)})
	}
	for _, l := range judged {
		st, ok := states[keyOf(l.Limit)]
		if !ok { // its enforced twin is Local: admitted from a block, the window unread
			out = append(out, LimitOutcome{Limit: l, Outcome: OutcomeAdmitted})
			continue
		}
		// st.quota - st.remaining is what the counter holds with the
		// enforced amount counted; the shadow limit counts its own amount.
		// Exactly: in float64, 0.4 - 0.3 - 0.1 + 0.1 is 0.10000000000000003,
		// which a shadow limit of 0.1 would refuse.
		held := decimal.Of(st.quota).Minus(st.remaining).Minus(decimal.Of(st.amount)).Plus(decimal.Of(l.Amount))
		quota := decimal.Of(l.Limit.Limit)
		utilization := ratio(held, quota)
		if held.Cmp(quota) <= 0 {
			out = append(out, LimitOutcome{Limit: l, Outcome: OutcomeAdmitted, Utilization: utilization})
			continue
		}
		m.logShadow(ctx, l, utilization, "would hold "+held.Text()+" of "+amounttext.Full(l.Limit.Limit))
		out = append(out, LimitOutcome{Limit: l, Outcome: OutcomeShadowRefused, Utilization: utilization})
	}
	return out
}

// failed applies the failure policy to a request whose decision failed. It
// logs at most one line a second: when the database is down, every request
// fails alike.
func (m *middleware) failed(ctx context.Context, limits []Limit, err error) decision {
	var closed []Limit
	for _, l := range limits {
		if l.Mode == Enforce && l.OnFailure == FailClosed && l.Amount != 0 {
			closed = append(closed, l)
		}
	}
	log, suppressed := m.failures.allow(time.Now())
	if len(closed) > 0 {
		if log {
			m.logger.LogAttrs(ctx, slog.LevelWarn, "pgadmit: admission failed, request refused (fail closed)",
				slog.Int("limits_failing_closed", len(closed)), slog.String("error", err.Error()),
				slog.Int("similar_lines_suppressed", suppressed))
		}
		d := decision{err: &UnavailableError{Err: err, Limits: closed}}
		for _, l := range closed {
			d.outcomes = append(d.outcomes, LimitOutcome{Limit: l, Outcome: OutcomeFailedClosed})
		}
		return d
	}
	if log {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "pgadmit: admission failed, request admitted unrecorded (fail open)",
			slog.String("error", err.Error()), slog.Int("similar_lines_suppressed", suppressed))
	}
	d := decision{failedOpen: true}
	for _, l := range limits {
		if l.Amount != 0 {
			d.outcomes = append(d.outcomes, LimitOutcome{Limit: l, Outcome: OutcomeFailedOpen})
		}
	}
	return d
}

// invalidLimits is the decision of a request whose limits no request can
// be decided on (ErrInvalidLimit), or whose Limiter cannot run (a nil
// pool): the configuration is wrong, which the error handler answers with
// a 500 and the log tells, at most one line a second (every request would
// log it).
func (m *middleware) invalidLimits(ctx context.Context, err error) decision {
	if log, suppressed := m.misconfigured.allow(time.Now()); log {
		m.logger.LogAttrs(ctx, slog.LevelError, "pgadmit: configuration error, request not decided",
			slog.String("error", err.Error()), slog.Int("similar_lines_suppressed", suppressed))
	}
	return decision{err: err}
}

// logShadow logs a shadow limit that would have refused a request, at
// most one line a second per shadow limit (its counter and quota), with
// how many of its lines were held back since its last: a hot key refused
// on every request would flood the log, and the Observer counts every
// refusal anyway. Logs may name the scope key; metrics never do.
func (m *middleware) logShadow(ctx context.Context, l Limit, utilization float64, why string) {
	log, suppressed := m.shadows.allow(shadowLine{counter: keyOf(l.Limit), quota: l.Limit.Limit}, time.Now())
	if !log {
		return
	}
	m.logger.LogAttrs(ctx, slog.LevelInfo, "pgadmit: shadow limit would refuse",
		slog.String("scope_type", l.Scope.Type), slog.String("scope_key", l.Scope.Key),
		slog.String("metric", l.Metric), slog.Float64("limit", l.Limit.Limit), slog.Float64("amount", l.Amount),
		slog.Float64("utilization", utilization), slog.String("policy", l.Policy), slog.String("why", why),
		slog.Int("similar_lines_suppressed", suppressed))
}

// shadowLine keys the throttle of shadow refusals' lines: one shadow limit,
// by its counter and its quota (two limits being tried out on one enforced
// counter each log their own).
type shadowLine struct {
	counter key
	quota   float64
}

// logInvalidShadow logs a shadow limit that was set aside because
// ratelimit would refuse it as input, at most one line a second (it comes
// from configuration, so every request would log it).
func (m *middleware) logInvalidShadow(ctx context.Context, l Limit, err error) {
	if log, suppressed := m.invalidShadows.allow(time.Now()); log {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "pgadmit: invalid shadow limit set aside",
			slog.String("scope_type", l.Scope.Type), slog.String("scope_key", l.Scope.Key),
			slog.String("metric", l.Metric), slog.String("policy", l.Policy), slog.String("error", err.Error()),
			slog.Int("similar_lines_suppressed", suppressed))
	}
}

// refusedInCall says why Reserve would refuse call with shadow limit l
// added, which alone it accepts, or returns nil: another limit of the call
// on l's counter (Reserve takes one limit per counter), or a call already
// at ratelimit.MaxLimitsPerCall.
func refusedInCall(call []Limit, l Limit) error {
	switch {
	case indexOf(call, keyOf(l.Limit)) >= 0:
		return &ratelimit.ValidationError{Field: "Limit", Value: keyOf(l.Limit).String(),
			Reason: "same scope, metric and window as another shadow limit of the request"}
	case len(call) >= ratelimit.MaxLimitsPerCall:
		return &ratelimit.ValidationError{Field: "Limits", Value: len(call) + 1,
			Reason: fmt.Sprintf("Reserve takes at most %d limits; the shadow limits past them are set aside", ratelimit.MaxLimitsPerCall)}
	}
	return nil
}

// without is limits less those at the indexes in skip, in a copy when
// any: limits is the caller's.
func without(limits []Limit, skip map[int]bool) []Limit {
	if len(skip) == 0 {
		return limits
	}
	out := make([]Limit, 0, len(limits))
	for i, l := range limits {
		if !skip[i] {
			out = append(out, l)
		}
	}
	return out
}

// indexOf is the position of the limit with key k in limits, or -1.
func indexOf(limits []Limit, k key) int {
	for i, l := range limits {
		if keyOf(l.Limit) == k {
			return i
		}
	}
	return -1
}

// enforcedOf lists the enforced limits: the ones headers speak of.
func enforcedOf(limits []Limit) []Limit {
	var out []Limit
	for _, l := range limits {
		if l.Mode == Enforce {
			out = append(out, l)
		}
	}
	return out
}

// ratio is held over quota, 1 for a zero quota that holds something. It
// divides exactly: float64's (1.3 - 0.13) / 1.3 is 0.8999999999999999, below
// a near-limit threshold of 0.9.
func ratio(held, quota decimal.Units) float64 {
	switch {
	case quota.Sign() > 0:
		return held.Ratio(quota)
	case held.Sign() > 0:
		return 1
	}
	return 0
}
