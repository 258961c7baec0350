package httpadmit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"

	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/internal/runecut"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// admission is the state of one admitted request, shared between the
// middleware and its handler through the request's context.
type admission struct {
	grant ratelimit.Grant // empty when the request failed open
	outer *admission      // of a middleware around this one, on the same request
	// headers is what the request's headers show, of this middleware and
	// the ones around it, for a middleware inside to add its own to.
	headers shownHeaders

	mu      sync.Mutex
	usage   map[string]float64
	discard string // reason given to Discard, if it was called
	// answeredInside is the reason of a middleware inside this one that
	// answered the request itself (its default handlers); servedInside
	// says one inside admitted it and committed it: see releaseFor.
	answeredInside string
	servedInside   bool
	ended          bool // the handler returned: reports are refused
}

// report is what the handler reported: its usage, Discard's reason, why
// a middleware inside answered the request, if one did, and whether one
// inside served it.
type report struct {
	usage          map[string]float64
	discard        string
	answeredInside string
	servedInside   bool
}

type contextKey struct{}

func admissionFrom(ctx context.Context) (*admission, bool) {
	if ctx == nil { // no admission, rather than a panic in ctx.Value
		return nil, false
	}
	a, ok := ctx.Value(contextKey{}).(*admission)
	return a, ok
}

// ReportUsage tells the middleware what the request really used, per
// metric (for example the tokens in the upstream's usage field); the
// request is committed with it after the handler returns. Each call
// replaces the amounts of the metrics it names, so a streaming handler can
// report its running total as it goes: if the stream is then cut, what was
// reported is what gets committed. Metrics never reported are committed at
// their estimate. A metric the request reserved nothing on (its limits'
// Amount was zero, so Reserve skipped them) is not charged: give a limit
// whose usage the handler reports an estimate above zero. A metric with no
// name, or an amount that ratelimit.ValidateAmount refuses (negative, NaN,
// infinite, above ratelimit.MaxAmount or between zero and
// ratelimit.MinAmount: what Commit would refuse), is an error that
// errors.As finds a *ratelimit.ValidationError in (it matches
// ratelimit.ErrInvalidInput), and changes nothing:
//
//	httpadmit: ReportUsage: invalid usage["tokens"] (-1): must not be negative
//
// Report before the handler returns: the request is settled then, and a
// later call (from a goroutine the handler started) returns
// ErrHandlerReturned and is not charged. A handler that streams from
// another goroutine must wait for it to report before returning.
//
// Behind several middlewares (one for every route, another for a route's
// own limits), the report, as Discard, reaches each of them: the request
// of each is settled with it.
func ReportUsage(ctx context.Context, usage map[string]float64) error {
	a, ok := admissionFrom(ctx)
	if !ok {
		return ErrNoAdmission
	}
	for metric, v := range usage {
		if metric == "" {
			return oneprefix.Errorf("httpadmit: ReportUsage: %w", &ratelimit.ValidationError{Field: `usage[""]`, Value: v, Reason: "the metric must be named"})
		}
		if err := ratelimit.ValidateAmount(v); err != nil {
			if invalid := (*ratelimit.ValidationError)(nil); errors.As(err, &invalid) {
				invalid.Field = fmt.Sprintf("usage[%q]", metric)
			}
			return oneprefix.Errorf("httpadmit: ReportUsage: %w", err)
		}
	}
	return a.report(func(a *admission) {
		if a.usage == nil {
			a.usage = make(map[string]float64, len(usage))
		}
		maps.Copy(a.usage, usage)
	})
}

// Discard makes the middleware release the request's reservation instead
// of committing it, recording reason: for a request the upstream never
// served (it failed, or refused it), so the client is not charged for it.
// A reason that Release would refuse (say, an upstream's error: longer
// than ratelimit.MaxReasonBytes, not valid UTF-8, or with NUL bytes) is
// recorded cleaned and cut, so that the release still happens. Like
// ReportUsage, it returns ErrHandlerReturned, and changes nothing, once the
// handler has returned.
func Discard(ctx context.Context, reason string) error {
	a, ok := admissionFrom(ctx)
	if !ok {
		return ErrNoAdmission
	}
	reason = releaseReason(reason)
	return a.report(func(a *admission) { a.discard = reason })
}

// answeredInside records on the admissions of the middlewares around the
// one answering r (its default handlers) that it answered r itself, with
// reason: a request answered by a middleware never reaches the upstream
// through it. Unlike Discard, it gives way to usage the handler reports,
// and to another middleware inside that commits the request: a handler
// that tried this middleware's route in-process and served the request
// another way did reach an upstream (releaseFor). A nil r, or one that came
// through no other middleware, has nothing to record; one whose outer
// handler already returned is left alone.
func answeredInside(r *http.Request, reason string) {
	if r == nil {
		return
	}
	if a, ok := admissionFrom(r.Context()); ok {
		_ = a.report(func(a *admission) { a.answeredInside = reason })
	}
}

// report applies a report to a and to the admissions of the middlewares
// around it (one for every route, another for a route's own limits): they
// admitted the same request, whose handler reports to the innermost. It
// returns ErrHandlerReturned, and changes nothing, once a's handler has
// returned. The locks are held from the innermost out, so that a cannot
// end meanwhile, nor the outer ones, which end after it.
func (a *admission) report(apply func(*admission)) error {
	var chain []*admission
	for c := a; c != nil; c = c.outer {
		c.mu.Lock()
		defer c.mu.Unlock()
		chain = append(chain, c)
	}
	if a.ended {
		return ErrHandlerReturned
	}
	for _, c := range chain {
		if !c.ended { // an outer handler that returned first (it ran this one on another goroutine)
			apply(c)
		}
	}
	return nil
}

// GrantFrom returns the grant the request in ctx was admitted with: its
// reservations and leases, for example to Attach them to a task. ok is
// false for a context that did not come through the middleware; the grant
// is empty for a request admitted without a decision (fail open). Behind
// several middlewares, it is the grant of the innermost.
func GrantFrom(ctx context.Context) (grant ratelimit.Grant, ok bool) {
	a, ok := admissionFrom(ctx)
	if !ok {
		return ratelimit.Grant{}, false
	}
	return a.grant, true
}

// end refuses further reports and returns what was reported: a call of
// ReportUsage or Discard is either in it or refused.
func (a *admission) end() report {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	return report{usage: a.usage, discard: a.discard, answeredInside: a.answeredInside, servedInside: a.servedInside}
}

// releaseReason makes reason one that Release accepts (valid UTF-8, no NUL
// bytes, at most ratelimit.MaxReasonBytes), so that a reason built from an
// upstream's error cannot make the release fail and leave the grant held.
func releaseReason(reason string) string {
	reason = runecut.Text(reason, ratelimit.MaxReasonBytes)
	if reason == "" {
		reason = "discarded"
	}
	return reason
}
