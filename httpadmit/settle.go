package httpadmit

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/internal/ticking"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Reasons recorded on reservations and leases the middleware releases.
const (
	// ReasonHandlerPanic releases a request whose handler panicked, or
	// code the middleware called before it (an Observer, the logger),
	// with its context live and no write failed: a panic once its client
	// left, its deadline passed or a write failed (http.ErrAbortHandler
	// from a httputil.ReverseProxy whose stream was cut) is released with
	// the reason below that says so.
	ReasonHandlerPanic = "handler_panic"
	// ReasonClientDisconnected releases a request whose context was
	// cancelled while its handler ran: its client went away.
	// ReasonRequestDeadlineExceeded releases one whose context's deadline
	// passed instead (http.TimeoutHandler, a server's request timeout), or
	// whose write to the client failed on its deadline (the server's
	// WriteTimeout, a ResponseController's SetWriteDeadline), which
	// net/http also cancels the context of: its client may still be
	// waiting. ReasonStreamCut releases one whose write failed otherwise
	// with its context still live.
	ReasonClientDisconnected      = "client_disconnected"
	ReasonRequestDeadlineExceeded = "request_deadline_exceeded"
	ReasonStreamCut               = "stream_cut"
	// ReasonRefusedInside and ReasonUndecidedInside release a request
	// admitted by one middleware and then answered by the default handlers
	// of another inside it: refused (429), or not decided (400, 500, 503).
	ReasonRefusedInside   = "refused_inside"
	ReasonUndecidedInside = "undecided_inside"
)

// run serves an admitted request and settles it, whatever way the handler
// ends: returning, panicking (the panic goes on after settling), or
// finding its client gone. headers is what its headers show (families
// and limits), for a middleware inside to show too.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, grant ratelimit.Grant, headers shownHeaders) {
	m.runAs(w, r, next, grant, grant, headers)
}

// runAs is run, with shown the grant that GrantFrom returns to the
// handler: grant, or, for a request this middleware has no limits for
// behind another one (an empty grant), the outer one's.
func (m *middleware) runAs(w http.ResponseWriter, r *http.Request, next http.Handler, grant, shown ratelimit.Grant, headers shownHeaders) {
	a := &admission{grant: shown, headers: headers}
	rw, hw := wrap(w)
	// Its writer keeps the fields of its families and of those sent around
	// it, which it sets too (shown).
	rw.fields = heldFields(w.Header(), m.fieldsOf(m.headers|headers.families))
	// The deferred settle is in place before any code that may panic (the
	// Observer's LeasesHeld included): serve has handed the grant over.
	stopRenewing := func() {}
	leasesHeld := false // told to the Observer, to be taken back
	leasesLost := 0     // of those, taken back by the renewals, which found them lost
	panicked := true
	defer func() {
		// While the handler's panic unwinds, a panic in code the settle
		// calls (the Observer, the logger) is logged, not passed on: it
		// would replace the handler's, which net/http then never shows.
		guard := func(f func()) { f() }
		if panicked {
			guard = func(f func()) { m.whilePanicking(r.Context(), f) }
		}
		// The leases told held are taken back once the grant is settled,
		// even if code the settle calls (the Observer's DatabaseCall, the
		// logger) panics.
		defer func() {
			if leasesHeld {
				stopRenewing() // leasesLost is the renewals' until they have stopped
				guard(func() { m.observer.LeasesHeld(leasesLost - len(grant.Leases)) })
			}
		}()
		// Reports end with the handler, before anything else: a report
		// from a goroutine it left running is refused, not lost.
		rep := a.end()
		stopRenewing()
		reason := ""
		switch {
		case r.Context().Err() != nil, rw.err != nil:
			// Checked before the handler's return reaches the server, which
			// cancels the context only afterwards: the client went away, the
			// request's deadline passed, or a write failed. A handler that
			// panics then is most often aborting the response
			// (http.ErrAbortHandler: a httputil.ReverseProxy whose copy to
			// the client failed), and any other panic net/http logs with
			// its stack: the reason tells what ended the request.
			reason = endedReason(r.Context(), rw.err)
		case panicked:
			reason = ReasonHandlerPanic
		}
		release := releaseFor(rep, reason, m.afterHeader && rw.headerOut)
		if release == "" && a.outer != nil {
			// Its upstream ran: the middlewares around this one commit too,
			// though another inside them answered the request before or
			// after (a handler that tried routes in turn).
			_ = a.outer.report(func(o *admission) { o.servedInside = true })
		}
		guard(func() { m.settle(r.Context(), grant, rep.usage, release) })
	}()
	a.outer, _ = admissionFrom(r.Context())
	m.observer.LeasesHeld(len(grant.Leases))
	leasesHeld = true
	stopRenewing = m.renewLeases(r.Context(), grant, &leasesLost)
	next.ServeHTTP(hw, r.WithContext(context.WithValue(r.Context(), contextKey{}, a)))
	panicked = false
}

// endedReason is the reason a request whose context ended, or whose write
// to the client failed (writeErr), is released with:
// ReasonRequestDeadlineExceeded when a deadline passed (the context's own,
// one its canceller gave as the cause, or the write's: the server's
// WriteTimeout, a SetWriteDeadline), else ReasonClientDisconnected for a
// context that ended (net/http cancels the context of a request whose
// client left, and of one whose write failed, on its deadline too), else
// ReasonStreamCut.
func endedReason(ctx context.Context, writeErr error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(context.Cause(ctx), context.DeadlineExceeded),
		errors.Is(writeErr, os.ErrDeadlineExceeded):
		return ReasonRequestDeadlineExceeded
	case ctx.Err() != nil:
		return ReasonClientDisconnected
	}
	return ReasonStreamCut
}

// releaseFor says how a request is settled after its handler ended (""
// when it is committed, else the reason it is released):
//   - Discard was called: released with its reason;
//   - a middleware inside answered the request itself (its default
//     handlers refused it or could not decide it), and the handler neither
//     reported usage nor had another middleware inside serve it: released
//     with that middleware's reason. Usage reported, or a middleware
//     inside that admitted and committed it, says an upstream did run (the
//     handler served the request another way, before or after);
//   - the handler ended normally: committed with the usage it reported
//     (the estimate for metrics it did not report);
//   - it ended abnormally (abnormal is the reason): committed with the usage
//     it reported when it reported some, since the upstream spent it, or
//     when it had written its final status under WithCommitAfterHeader
//     (answered), unless a middleware inside answered it and none served
//     it; else released with that reason.
func releaseFor(rep report, abnormal string, answered bool) string {
	answeredInside := rep.answeredInside != "" && !rep.servedInside
	switch {
	case rep.discard != "":
		return rep.discard
	case len(rep.usage) > 0:
		return ""
	case abnormal != "" && answered && !answeredInside:
		return ""
	case abnormal != "":
		return abnormal
	case answeredInside:
		return rep.answeredInside
	}
	return ""
}

// settle commits grant with usage, or releases it when release is not ""
// (releaseFor). A Commit that ratelimit refuses as invalid falls back to
// Release, so the grant never stays held. Errors are logged, at most one
// line a second (when the database is down, every request's settle fails
// alike); what a failed settle leaves held lapses by itself (leases at
// their TTL, reservations when their window ends). A failed settle is not
// tried again: the end of the response waits for this, and ratelimit
// already sends once more a statement none of which reached the server.
func (m *middleware) settle(ctx context.Context, grant ratelimit.Grant, usage map[string]float64, release string) {
	if grant.Empty() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.settleTimeout)
	defer cancel()
	if release == "" {
		start := time.Now()
		settled, err := m.limiter.Commit(ctx, grant, usage)
		m.observeSettle(OpCommit, grant, settled, time.Since(start), err)
		if err == nil {
			return
		}
		if !errors.Is(err, ratelimit.ErrInvalidInput) {
			if log, suppressed := m.settles.allow(time.Now()); log {
				m.logger.LogAttrs(ctx, slog.LevelError, "pgadmit: commit failed", slog.String("error", err.Error()),
					slog.Int("similar_lines_suppressed", suppressed))
			}
			return
		}
		release = "invalid_usage"
	}
	start := time.Now()
	settled, err := m.limiter.Release(ctx, grant, release)
	m.observeSettle(OpRelease, grant, settled, time.Since(start), err)
	if err == nil {
		return
	}
	if log, suppressed := m.settles.allow(time.Now()); log {
		m.logger.LogAttrs(ctx, slog.LevelError, "pgadmit: release failed", slog.String("reason", release), slog.String("error", err.Error()),
			slog.Int("similar_lines_suppressed", suppressed))
	}
}

// observeSettle reports a Commit or Release of grant as a database call,
// unless it made none: a grant of local reservations only settles in
// memory, and a Commit that ratelimit refused as invalid never left. One
// that found a reservation unknown is reported with ErrUnknownGrant
// (unknownGrant).
func (m *middleware) observeSettle(op string, grant ratelimit.Grant, settled ratelimit.Settlement, took time.Duration, err error) {
	if !inDatabase(grant) || errors.Is(err, ratelimit.ErrInvalidInput) {
		return
	}
	if err == nil {
		err = unknownGrant(op, grant, settled)
	}
	m.observer.DatabaseCall(op, took, err)
}

// unknownGrant is the error reported to the Observer for a Commit or
// Release that succeeded but found reservations of grant that the database
// no longer knows (StatusUnknown: pruned while the request ran), or nil.
// ratelimit reports them in the Settlement, not as an error; a gateway
// needs to see grants it lost. A Local reservation is left out: it settles
// in memory, not in this call.
func unknownGrant(op string, grant ratelimit.Grant, settled ratelimit.Settlement) error {
	unknown := 0
	for i, o := range settled.Reservations {
		if o.Status == ratelimit.StatusUnknown && i < len(grant.Reservations) && !grant.Reservations[i].Local {
			unknown++
		}
	}
	if unknown == 0 {
		return nil
	}
	return fmt.Errorf("httpadmit: %s: %s of the grant unknown to the database: %w", op, plural.Count(unknown, "reservation", "reservations"), ratelimit.ErrUnknownGrant)
}

// renewLeases heartbeats the grant's leases while the request runs, every
// third of their shortest TTL, so that a stream longer than the TTL keeps
// its slots. A lease a renewal finds lost (a *ratelimit.LeaseLostError:
// expired, or released by someone else) is reported once, as that
// renewal's failed DatabaseCall, and not sent again: every later renewal
// of the request would fail alike, its other leases renewed all the same,
// from then on every third of their own shortest TTL. It is taken out of
// the Observer's LeasesHeld then, and counted in *lost, which the caller
// reads once stop has returned; the settle still names it. The returned
// stop ends the heartbeat and waits for it.
func (m *middleware) renewLeases(ctx context.Context, grant ratelimit.Grant, lost *int) (stop func()) {
	if len(grant.Leases) == 0 {
		return func() {}
	}
	ctx = context.WithoutCancel(ctx)
	leases := slices.Clone(grant.Leases) // those not found lost
	return ticking.EveryNext(renewalInterval(leases), func() time.Duration {
		leases = m.renewOnce(ctx, leases, lost)
		return renewalInterval(leases)
	})
}

// renewalInterval is a third of the shortest TTL of leases (of
// DefaultLeaseTTL for a lease without one, or when none is left).
func renewalInterval(leases []ratelimit.Lease) time.Duration {
	ttl := ratelimit.DefaultLeaseTTL
	for i, l := range leases {
		if i == 0 || l.TTL < ttl {
			ttl = l.TTL
		}
	}
	if ttl <= 0 {
		ttl = ratelimit.DefaultLeaseTTL
	}
	return ttl / 3
}

// renewOnce is one renewal of renewLeases: it renews leases and returns
// those not found lost. A panic in code it calls is recovered
// (recoverRenewal), and leases found lost before it are dropped all the
// same.
func (m *middleware) renewOnce(ctx context.Context, leases []ratelimit.Lease, lost *int) (left []ratelimit.Lease) {
	left = leases
	defer m.recoverRenewal(ctx)
	if len(leases) == 0 {
		return left
	}
	rctx, cancel := context.WithTimeout(ctx, m.settleTimeout)
	start := time.Now()
	_, err := m.limiter.RenewLeases(rctx, leases)
	cancel()
	dropped := 0
	if gone := (*ratelimit.LeaseLostError)(nil); errors.As(err, &gone) {
		left = slices.DeleteFunc(leases, func(l ratelimit.Lease) bool { return slices.Contains(gone.LeaseIDs, l.ID) })
		dropped = len(leases) - len(left)
	}
	m.observer.DatabaseCall(OpRenewLeases, time.Since(start), err)
	if dropped > 0 {
		// Counted as told before the call: should it panic, the settle
		// does not take them back a second time.
		*lost += dropped
		m.observer.LeasesHeld(-dropped)
	}
	// At most one line a second: when the database is down, every
	// long request's renewals fail alike.
	if err == nil {
		return left
	}
	if log, suppressed := m.renewals.allow(time.Now()); log {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "pgadmit: renewing leases failed", slog.String("error", err.Error()),
			slog.Int("similar_lines_suppressed", suppressed))
	}
	return left
}

// whilePanicking runs f, part of settling a request while a panic (its
// handler's, or that of code the middleware called before it) unwinds, and
// recovers a panic of f's own: passed on, it would replace the first one,
// which net/http recovers and logs, and which the gateway's authors need
// to see. It is logged with its stack (at most one line a second), and the
// first panic goes on.
func (m *middleware) whilePanicking(ctx context.Context, f func()) {
	defer func() {
		if p := recover(); p != nil {
			m.logPanic(ctx, &m.settlePanics, "pgadmit: panic settling a request that panicked", p)
		}
	}()
	f()
}

// recoverRenewal, deferred by each lease renewal, recovers a panic in code
// it calls (the Observer's DatabaseCall, the logger's handler). It runs off
// the request's goroutine: net/http, which recovers a handler's panic,
// never sees it, and it would end the process. As net/http does for a
// handler's panic, it is logged with its stack (at most one line a
// second), and not passed on: the renewals go on, since the request's
// leases still need them.
func (m *middleware) recoverRenewal(ctx context.Context) {
	if p := recover(); p != nil {
		m.logPanic(ctx, &m.renewalPanics, "pgadmit: panic renewing leases", p)
	}
}

// logPanic logs p, a panic recovered in code the middleware called, as msg
// with its stack, at most one line per t's interval. Called from the
// deferred call that recovered p, it takes the panicking goroutine's stack.
func (m *middleware) logPanic(ctx context.Context, t *throttle, msg string, p any) {
	ok, suppressed := t.allow(time.Now())
	if !ok {
		return
	}
	stack := debug.Stack() // still the panicking goroutine's: the deferred call has not returned
	defer func() {
		if recover() != nil { // the logger's handler panicked: it cannot tell
			stdlog.Printf("%s: %v\n%s", msg, p, stack)
		}
	}()
	m.logger.LogAttrs(ctx, slog.LevelError, msg, slog.Any("panic", p),
		slog.String("stack", string(stack)), slog.Int("similar_lines_suppressed", suppressed))
}
