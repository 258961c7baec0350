package httpadmit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/internal/textcell"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Mode says whether a limit may refuse a request. A value other than
// Enforce and Shadow is refused with ErrInvalidLimit.
type Mode uint8

const (
	// Enforce refuses a request that does not fit the limit (the default).
	Enforce Mode = iota
	// Shadow evaluates the limit and records the admission, but never
	// refuses: a request that would not have fit is counted
	// (OutcomeShadowRefused) and logged, then served. New limits are rolled
	// out this way.
	Shadow
)

// String is the mode's name, "enforce" or "shadow" (the mode label of
// package promadmit), or "Mode(n)" for another value.
func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Shadow:
		return "shadow"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// FailurePolicy says what happens to a request when the database errors or
// does not answer within the decision timeout. A value other than
// FailClosed and FailOpen is refused with ErrInvalidLimit.
type FailurePolicy uint8

const (
	// FailClosed refuses the request with 503 (the default): no request
	// passes unaccounted.
	FailClosed FailurePolicy = iota
	// FailOpen admits the request without a decision: nothing is recorded
	// for it, and it is counted (OutcomeFailedOpen).
	FailOpen
)

// String is the policy's name, "fail_closed" or "fail_open", or
// "FailurePolicy(n)" for another value.
func (p FailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "fail_closed"
	case FailOpen:
		return "fail_open"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// Limit is one limit a request must fit: a ratelimit.Limit (scope, metric,
// capacity, amount, window) with how it is applied. Limit.Policy, when set,
// names the limit in response headers and in 429 bodies; otherwise the name
// is derived from the metric (see the package documentation). Two limits
// of a request named alike (a plan's name on its requests and tokens
// limits, say) are told apart by their metric, as in "gold-requests".
type Limit struct {
	ratelimit.Limit
	Mode      Mode
	OnFailure FailurePolicy
}

// LimitsFunc maps a request to the limits it must fit: the API key from a
// header, the model from the route or the body, an estimate of its tokens.
// It may read r.Body, and must then leave a body for the handler (for
// example bytes.NewReader of what it read). No limits means the request
// passes untouched. An error is handed to the error handler and nothing is
// reserved; wrap ErrBadRequest for a 400.
type LimitsFunc func(r *http.Request) ([]Limit, error)

// checkLimits refuses limits the middleware cannot apply whatever the
// request, before anything is reserved: a Mode or FailurePolicy that is
// none of the defined values would otherwise be skipped (an unknown Mode
// is neither enforced nor shadow) or fail open (it is not FailClosed).
func checkLimits(limits []Limit) error {
	for i, l := range limits {
		switch {
		case l.Mode != Enforce && l.Mode != Shadow:
			return invalidLimit(i, "Mode", l.Mode, "unknown mode: want Enforce or Shadow")
		case l.OnFailure != FailClosed && l.OnFailure != FailOpen:
			return invalidLimit(i, "OnFailure", l.OnFailure, "unknown failure policy: want FailClosed or FailOpen")
		}
	}
	return nil
}

// invalidLimit is the error of a limit checkLimits refuses.
func invalidLimit(i int, field string, value any, reason string) error {
	return oneprefix.Errorf("%w: %w", ErrInvalidLimit, inLimit(i, &ratelimit.ValidationError{Field: field, Value: value, Reason: reason}))
}

// key identifies a limit's counter (or concurrency scope) the way Reserve
// does: two limits with the same key cannot share one Reserve call.
type key struct {
	scopeType, scopeKey, metric string
	window                      time.Duration // zero for concurrent limits
}

func keyOf(l ratelimit.Limit) key {
	k := key{scopeType: l.Scope.Type, scopeKey: l.Scope.Key, metric: l.Metric, window: l.Window}
	switch {
	case l.Metric == ratelimit.MetricConcurrent:
		k.window = 0
	case k.window == 0:
		k.window = ratelimit.DefaultWindow
	}
	return k
}

// keyOfExceeded is the key of the limit an *ExceededError is about.
func keyOfExceeded(e *ratelimit.ExceededError) key {
	return key{scopeType: e.ScopeType, scopeKey: e.ScopeKey, metric: e.Metric, window: time.Duration(e.WindowSeconds) * time.Second}
}

// String shows the scope and metric as inspect and Doctor do (textcell):
// quoted where they could read as another scope's.
func (k key) String() string {
	s := textcell.Scope(k.scopeType, k.scopeKey) + " " + textcell.Show(k.metric)
	if k.metric == ratelimit.MetricConcurrent {
		return s
	}
	return fmt.Sprintf("%s/%s", s, k.window)
}
