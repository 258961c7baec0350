package httpadmit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Defaults of the options.
const (
	// DefaultDecisionTimeout bounds how long a request waits for its
	// admission decision, connecting to the database included, before its
	// failure policy applies.
	DefaultDecisionTimeout = 250 * time.Millisecond
	// DefaultSettleTimeout bounds settling a request (Commit or Release)
	// after its handler returned, and each renewal of its leases.
	DefaultSettleTimeout = 2 * time.Second
)

// RefusalHandler writes the response to a request that a limit refused.
// When it runs, the rate-limit headers and Retry-After (for a refusal that
// retrying can cure) are already set on w. Behind another middleware that
// admitted the request, a handler that answers without the upstream should
// call Discard(r.Context(), reason), as the default handlers do, so that
// the outer middleware releases its reservation; one that serves a
// fallback leaves it to be committed, and should delete Retry-After
// (w.Header().Del), which was set for the 429 it replaces.
type RefusalHandler func(w http.ResponseWriter, r *http.Request, refusal *Refusal)

// ErrorHandler writes the response to a request that could not be decided:
// err wraps ErrBadRequest, is an *UnavailableError (ErrUnavailable), wraps
// ErrInvalidLimit (limits no request can be decided on), wraps the
// *ratelimit.ValidationError of a Limiter that cannot run (made from a nil
// pool: Field "conn") or of a middleware given a nil http.Handler (Field
// "next"), wraps ErrRequestEnded (the request's context ended before it
// was reserved: its client left, or its deadline passed), or is whatever
// the LimitsFunc returned. Invalid limits, a
// Limiter that cannot run and a nil handler are the configuration's errors,
// also logged (at most one line a second). Behind
// another middleware, the same holds as for a RefusalHandler: call Discard
// when the request will not reach the upstream.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// Refusal explains a request that an enforced limit refused.
type Refusal struct {
	// Exceeded is the database's explanation: how full the limit was, when
	// it resets and the retry-after, on the database's clock.
	Exceeded *ratelimit.ExceededError
	// Limit is the request's limit that refused it; Policy its name in the
	// headers and the problem body.
	Limit  Limit
	Policy string
}

// Option configures the middleware.
type Option func(*config)

type config struct {
	decisionTimeout time.Duration
	settleTimeout   time.Duration
	headers         HeaderFamily
	onRefusal       RefusalHandler
	onError         ErrorHandler
	observer        Observer
	logger          *slog.Logger
	afterHeader     bool // WithCommitAfterHeader
}

// WithDecisionTimeout sets how long a request may wait for its admission
// decision (default DefaultDecisionTimeout): past it, the failure policy of
// its limits applies, as when the database errors. Keep it to a few
// milliseconds above the database's usual latency, so that a database that
// hangs costs each request no more than this. The timeout includes what a
// cold pool does first (connect, then prepare and plan pgadmit's statements
// on each new connection, tens of milliseconds and at times more): warm the
// pool at start-up with ratelimit.Limiter.Warm, or allow more, lest the
// first requests of a gateway that fails closed get 503s.
// A d that is not positive makes New fail with a *ratelimit.ValidationError
// on "WithDecisionTimeout".
func WithDecisionTimeout(d time.Duration) Option {
	return func(c *config) { c.decisionTimeout = d }
}

// WithSettleTimeout sets how long settling a request after its handler may
// take, and each renewal of its leases (default DefaultSettleTimeout). The
// end of the response waits for the settle (net/http sends what it still
// buffers once the middleware returns), so a database that hangs delays it
// by up to d, twice d when a renewal was under way. A d
// that is not positive makes New fail with a *ratelimit.ValidationError on
// "WithSettleTimeout".
func WithSettleTimeout(d time.Duration) Option {
	return func(c *config) { c.settleTimeout = d }
}

// WithHeaders chooses the families of rate-limit headers sent on every
// response (default DefaultHeaders); 0 sends none. Retry-After is not one
// of them but HTTP's own (RFC 9110): it is set on a refusal that retrying
// can cure whatever f, 0 included. Behind another middleware, the families
// it sends are sent too, and all of them show the limits of both; 0 keeps
// this middleware's limits out of them.
func WithHeaders(f HeaderFamily) Option {
	return func(c *config) { c.headers = f }
}

// WithRefusalHandler replaces the default 429 response
// (DefaultRefusalHandler).
func WithRefusalHandler(h RefusalHandler) Option {
	return func(c *config) { c.onRefusal = h }
}

// WithErrorHandler replaces the default error responses
// (DefaultErrorHandler).
func WithErrorHandler(h ErrorHandler) Option {
	return func(c *config) { c.onError = h }
}

// WithObserver reports decisions and database latencies to o, for example
// the Prometheus metrics of package promadmit.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithCommitAfterHeader commits, when on, a request once its handler has
// written the response's final status (WriteHeader, or a first write or
// flush: its upstream answered), however it ends: its client leaving, its
// deadline passing, a write failing or a panic then no longer release it,
// and the metrics it did not report are committed at their estimate. For
// an upstream that charges once it answers, so that leaving before the
// handler's first ReportUsage is no way around the limits. Discard still
// releases the request, and one that ends abnormally before its status
// went out is released as by default (false: a request that ends
// abnormally without having reported usage is released, whatever it
// sent). Behind several middlewares, each settles as it is configured.
func WithCommitAfterHeader(on bool) Option {
	return func(c *config) { c.afterHeader = on }
}

// WithLogger sets where shadow refusals, database failures, configuration
// errors and settling errors are logged (default slog.Default() as it is
// when New runs, which a nil l also means).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// middleware is one configured instance of the middleware.
type middleware struct {
	config
	limiter        *ratelimit.Limiter
	limits         LimitsFunc
	failures       throttle // of the failure log lines
	invalidShadows throttle // of the lines about shadow limits set aside
	misconfigured  throttle // of the lines about limits no request can be decided on
	fields         []string // the names of the header families' fields (headerFields)
	renewals       throttle // of the lines about failed lease renewals
	settles        throttle // of the lines about failed commits and releases
	renewalPanics  throttle // of the lines about panics in lease renewals
	settlePanics   throttle // of the lines about panics settling a panicking request

	shadows keyedThrottle[shadowLine] // of the lines about shadow refusals, one per shadow limit
}

// New returns the middleware: for each request, limits says what it must
// fit; the limiter reserves it before next runs and settles it after. See
// the package documentation for what happens to refused, failed, panicking
// and cancelled requests. A nil limiter, or a zero one (not made with
// ratelimit.New), nil limits, a timeout that is not positive, unknown
// header families or a nil handler or observer is a
// *ratelimit.ValidationError (errors.Is ratelimit.ErrInvalidInput) whose
// Field names the argument or option ("limiter", "WithDecisionTimeout").
// A limiter made from a nil pool is taken: each request then fails
// (ErrorHandler), and so does each request of a middleware given a nil
// http.Handler (a *ratelimit.ValidationError on "next"), which reserves
// nothing.
func New(limiter *ratelimit.Limiter, limits LimitsFunc, opts ...Option) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(limiter, limits, opts)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		if next == nil { // the middleware cannot return an error: each request gets it
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				m.onError(w, r, m.invalidLimits(r.Context(), errNilHandler).err)
			})
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// newMiddleware checks New's arguments, applies the options over their
// defaults and checks what they set.
func newMiddleware(limiter *ratelimit.Limiter, limits LimitsFunc, opts []Option) (*middleware, error) {
	if limiter == nil {
		return nil, invalidConfig("limiter", nil, "must not be nil")
	}
	// A Check of no limits reads nothing: it fails only on a Limiter not
	// made with ratelimit.New, which would fail every request.
	if err := limiter.Check(context.Background(), nil); err != nil {
		return nil, invalidConfig("limiter", "Limiter{}", "not made with ratelimit.New")
	}
	if limits == nil {
		return nil, invalidConfig("limits", nil, "must not be nil")
	}
	c := config{
		decisionTimeout: DefaultDecisionTimeout,
		settleTimeout:   DefaultSettleTimeout,
		headers:         DefaultHeaders,
		onRefusal:       DefaultRefusalHandler,
		onError:         DefaultErrorHandler,
		observer:        nopObserver{},
	}
	for _, opt := range opts {
		if opt != nil { // a nil Option (an unset one, conditionally chosen) sets nothing
			opt(&c)
		}
	}
	switch {
	case c.decisionTimeout <= 0:
		return nil, invalidConfig("WithDecisionTimeout", c.decisionTimeout, "must be positive")
	case c.settleTimeout <= 0:
		return nil, invalidConfig("WithSettleTimeout", c.settleTimeout, "must be positive")
	case c.headers&^allHeaders != 0:
		return nil, invalidConfig("WithHeaders", fmt.Sprintf("%#x", uint8(c.headers)), fmt.Sprintf("unknown header families %#x", uint8(c.headers&^allHeaders)))
	case c.onRefusal == nil:
		return nil, invalidConfig("WithRefusalHandler", nil, "must not be nil")
	case c.onError == nil:
		return nil, invalidConfig("WithErrorHandler", nil, "must not be nil")
	case c.observer == nil:
		return nil, invalidConfig("WithObserver", nil, "must not be nil")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return &middleware{config: c, limiter: limiter, limits: limits, fields: headerFields(c.headers)}, nil
}

// errNilHandler is what each request gets from a middleware given a nil
// http.Handler, which it would call.
var errNilHandler = oneprefix.Errorf("httpadmit: %w", &ratelimit.ValidationError{Field: "next", Value: nil,
	Reason: "the middleware was given a nil http.Handler"})

// invalidConfig is New's error for an argument or option it cannot run
// with: a *ratelimit.ValidationError (errors.Is ratelimit.ErrInvalidInput)
// naming it, the package named once: "httpadmit: New: invalid limiter
// (<nil>): must not be nil".
func invalidConfig(field string, value any, reason string) error {
	return oneprefix.Errorf("httpadmit: New: %w", &ratelimit.ValidationError{Field: field, Value: value, Reason: reason})
}

// serve decides r, then refuses it or runs next and settles.
func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	limits, err := m.limits(r)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	outer, behind := admissionFrom(r.Context())
	var around shownHeaders // by the middlewares around this one: the headers show theirs too
	if behind {
		around = outer.headers
	}
	if len(limits) == 0 {
		if behind {
			// Behind another middleware, the request goes through as one
			// admitted with nothing to settle, so that the middlewares
			// around learn whether its upstream ran (servedInside) or one
			// further in answered it (answeredInside). GrantFrom still
			// finds theirs.
			m.runAs(w, r, next, ratelimit.Grant{}, outer.grant, around)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	// held is the grant until run takes it over. Code the middleware calls
	// before (an Observer, the logger of shadow refusals, the writer's
	// Header) may panic: the grant is then released, as for a handler that
	// panics, and the panic goes on.
	var held ratelimit.Grant
	defer func() {
		if !held.Empty() { // a panic unwinds: one in the settle must not replace it
			m.whilePanicking(r.Context(), func() { m.settle(r.Context(), held, nil, ReasonHandlerPanic) })
		}
	}()
	d := m.decide(r.Context(), limits, &held)
	if len(d.outcomes) > 0 {
		m.observer.Decided(d.outcomes)
	}
	switch {
	case d.err != nil:
		m.onError(w, r, d.err)
	case d.refusal != nil:
		policies := withOuter(around.policies, refusalHeaders(limits, d.refusal))
		d.refusal.Policy = nameOf(policies, d.refusal.Limit) // as the headers name it among the outer ones'
		m.setHeaders(w.Header(), m.shown(around, policies), around)
		if e := d.refusal.Exceeded; e.Retryable {
			w.Header().Set("Retry-After", fmt.Sprint(ceilSeconds(e.RetryAfter)))
		}
		m.onRefusal(w, r, d.refusal)
	default:
		// Failed open, it has no decision to show; sending no headers, it
		// shows none: the outer ones' stand, and only they are passed on.
		shown := around
		if !d.failedOpen && m.headers != 0 {
			shown = m.shown(around, withOuter(around.policies, grantHeaders(limits, d.grant)))
			m.setHeaders(w.Header(), shown, around)
		}
		held = ratelimit.Grant{} // run settles it, whatever way it ends
		m.run(w, r, next, d.grant, shown)
	}
}

// shown is what the headers show of a request this middleware decided,
// behind those around it (around): policies (withOuter), in its families
// and in theirs, so that a family only they send does not leave out its
// limits (a 429 of its own whose x-ratelimit-remaining-requests, set
// around it, tells quota left). A middleware with WithHeaders(0) shows
// nothing: its limits are not for clients to see.
func (m *middleware) shown(around shownHeaders, policies []policy) shownHeaders {
	if m.headers == 0 {
		return shownHeaders{}
	}
	return shownHeaders{families: m.headers | around.families, policies: policies}
}

// setHeaders sets the headers of shown on h. Behind a middleware that
// showed policies (around), it first deletes the fields of the families
// it sets: shown includes those policies (withOuter).
func (m *middleware) setHeaders(h http.Header, shown, around shownHeaders) {
	if len(around.policies) > 0 {
		clearHeaders(h, shown.families)
	}
	setHeaders(h, shown.families, shown.policies)
}

// fieldsOf are the fields of families (headerFields): m.fields, made
// once, when they are the middleware's own, as they are unless a
// middleware around it sends others.
func (m *middleware) fieldsOf(families HeaderFamily) []string {
	if families == m.headers {
		return m.fields
	}
	return headerFields(families)
}
