package httpadmit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

var errCallback = errors.New("callback panicked")

// panickingObserver is a recorder whose one method, named by in, panics
// (LeasesHeld when leases are taken, DatabaseCall for the Reserve).
type panickingObserver struct {
	*recorder
	in string
}

func (o panickingObserver) Decided(outcomes []httpadmit.LimitOutcome) {
	o.recorder.Decided(outcomes)
	if o.in == "Decided" {
		panic(errCallback)
	}
}

func (o panickingObserver) DatabaseCall(op string, took time.Duration, err error) {
	o.recorder.DatabaseCall(op, took, err)
	if o.in == "DatabaseCall" && op == httpadmit.OpReserve {
		panic(errCallback)
	}
}

func (o panickingObserver) LeasesHeld(delta int) {
	if o.in == "LeasesHeld" && delta > 0 {
		panic(errCallback)
	}
	o.recorder.LeasesHeld(delta)
}

// panickingHandler is a slog.Handler that panics on a shadow refusal's line.
type panickingHandler struct{ slog.Handler }

func (h panickingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "pgadmit: shadow limit would refuse" {
		panic(errCallback)
	}
	return h.Handler.Handle(ctx, r)
}

// Code of the gateway's that the middleware calls between a Reserve that
// admitted the request and the handler (an Observer, the logger of shadow
// refusals) may panic. The grant is released, once, and the panic goes on
// to the server unchanged, as a handler's does; it used to stay held until
// its leases' TTL and its window's end.
func TestPanicBeforeTheHandlerReleasesTheGrant(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"Decided", "DatabaseCall", "LeasesHeld", "logger"} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			limits := []httpadmit.Limit{
				window("api_key", key, ratelimit.MetricTokens, 1000, 100),
				concurrent("model", key, 2),
			}
			opts := []httpadmit.Option{httpadmit.WithObserver(panickingObserver{recorder: e.obs, in: in})}
			if in == "logger" {
				// A lower limit tried out on the enforced limit's counter: the
				// request would not fit it, which is logged once admitted.
				limits = append(limits, shadow(window("api_key", key, ratelimit.MetricTokens, 50, 100)))
				opts = []httpadmit.Option{httpadmit.WithLogger(slog.New(panickingHandler{slog.NewTextHandler(e.logs, nil)}))}
			}
			panicsBeforeTheHandler(t, e.middleware(fixed(limits...), opts...), in)
			if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
				t.Errorf("tokens after the panic = %+v, want released", got)
			}
			if got := e.liveLeases("model", key); got != 0 {
				t.Errorf("%d live leases after the panic, want 0", got)
			}
			e.nothingHeld()
			calls := e.obs.callCounts()
			if calls["release ok"] != 1 || calls["commit ok"] != 0 {
				t.Errorf("database calls %v, want one release and no commit", calls)
			}
			if got := e.obs.heldLeases(); got != 0 {
				t.Errorf("LeasesHeld sums to %d, want 0", got)
			}
		})
	}
}

// An Observer whose DatabaseCall panics on the Commit (or Release) that
// settles an admitted request, after the database settled it: the leases
// it reported held (+n) are taken back (-n) all the same, and the panic
// goes on unchanged. The -n used to be skipped, so that a gauge of leases
// held (promadmit's) grew by n for good.
func TestPanicInTheSettlesDatabaseCallStillTakesBackTheLeases(t *testing.T) {
	t.Parallel()
	for _, op := range []string{httpadmit.OpCommit, httpadmit.OpRelease} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			obs := settlePanicObserver{recorder: e.obs, op: op}
			h := e.middleware(fixed(concurrent("model", key, 2)), httpadmit.WithObserver(obs))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if op == httpadmit.OpRelease {
						_ = httpadmit.Discard(r.Context(), "test")
					}
				}))
			func() {
				defer func() {
					if p := recover(); p != errCallback {
						t.Errorf("recovered %v, want the DatabaseCall panic", p)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
			}()
			if got := e.obs.callCounts()[op+" ok"]; got != 1 {
				t.Errorf("%d %s calls, want 1: %v", got, op, e.obs.callCounts())
			}
			if got := e.obs.heldLeases(); got != 0 {
				t.Errorf("LeasesHeld sums to %d, want 0", got)
			}
			e.nothingHeld()
		})
	}
}

// settlePanicObserver is a recorder whose DatabaseCall panics on op.
type settlePanicObserver struct {
	*recorder
	op string
}

func (o settlePanicObserver) DatabaseCall(op string, took time.Duration, err error) {
	o.recorder.DatabaseCall(op, took, err)
	if op == o.op {
		panic(errCallback)
	}
}

// Behind another middleware, a panic in code the inner one calls before the
// handler (its Observer's Decided, DatabaseCall or LeasesHeld) releases the
// grants of both, once each, and goes on unchanged: the inner one's from
// serve, the outer one's as for a handler's panic.
func TestPanicBeforeTheHandlerInsideReleasesBothGrants(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"Decided", "DatabaseCall", "LeasesHeld"} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key, model := uniqueKey("key"), uniqueKey("model")
			outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 100), concurrent("api_key", key, 2)))
			inner := e.middleware(fixed(window("model", model, ratelimit.MetricTokens, 1000, 100), concurrent("model", model, 2)),
				httpadmit.WithObserver(panickingObserver{recorder: e.obs, in: in}))
			panicsBeforeTheHandler(t, func(h http.Handler) http.Handler { return outer(inner(h)) }, in)
			for _, scope := range [][2]string{{"api_key", key}, {"model", model}} {
				if got := e.books(scope[0], scope[1], ratelimit.MetricTokens); got != (book{}) {
					t.Errorf("%s tokens after the panic = %+v, want released", scope[0], got)
				}
				if got := e.liveLeases(scope[0], scope[1]); got != 0 {
					t.Errorf("%d live %s leases after the panic, want 0", got, scope[0])
				}
			}
			calls := e.obs.callCounts()
			if calls["release ok"] != 2 || calls["commit ok"] != 0 {
				t.Errorf("database calls %v, want two releases and no commit", calls)
			}
			if got := e.obs.heldLeases(); got != 0 {
				t.Errorf("LeasesHeld sums to %d, want 0", got)
			}
			e.nothingHeld()
		})
	}
}

// panicsBeforeTheHandler serves one request through wrap and asserts that
// it panics with errCallback, from the callback in names, before the
// handler runs.
func panicsBeforeTheHandler(t *testing.T, wrap func(http.Handler) http.Handler, in string) {
	t.Helper()
	ran := false
	h := wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	func() {
		defer func() {
			if p := recover(); p != errCallback {
				t.Errorf("recovered %v, want the %s panic", p, in)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	}()
	if ran {
		t.Errorf("the handler ran")
	}
}

var errHandler = errors.New("handler panicked")

// leasesPanicObserver is a recorder whose LeasesHeld panics when the leases
// are taken back (-n), after recording it.
type leasesPanicObserver struct{ *recorder }

func (o leasesPanicObserver) LeasesHeld(delta int) {
	o.recorder.LeasesHeld(delta)
	if delta < 0 {
		panic(errCallback)
	}
}

// A callback that panics while the handler's own panic is settled (the
// Observer's DatabaseCall of the Release, its LeasesHeld(-n)) no longer
// replaces the handler's panic: net/http, which recovers a handler's panic
// and logs it, saw the callback's and the handler's was lost. The handler's
// goes on, the callback's is logged with its stack, and the grant is
// released all the same. The same holds for a panic in code the
// middleware calls before the handler (an Observer's Decided) whose
// release's DatabaseCall panics too.
func TestCallbackPanicWhileSettlingAPanicKeepsTheFirstPanic(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		observer func(*recorder) httpadmit.Observer
		want     error // the panic that must reach the server
	}{
		"release's DatabaseCall": {func(r *recorder) httpadmit.Observer { return settlePanicObserver{recorder: r, op: httpadmit.OpRelease} }, errHandler},
		"LeasesHeld(-n)":         {func(r *recorder) httpadmit.Observer { return leasesPanicObserver{r} }, errHandler},
		"Decided, then the release's DatabaseCall": {func(r *recorder) httpadmit.Observer {
			return decidedAndReleasePanicObserver{settlePanicObserver{recorder: r, op: httpadmit.OpRelease}}
		}, errDecided},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			h := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 100), concurrent("model", key, 2)),
				httpadmit.WithObserver(tc.observer(e.obs)))(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(errHandler) }))
			func() {
				defer func() {
					if p := recover(); p != tc.want {
						t.Errorf("recovered %v, want %v", p, tc.want)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
			}()
			logs := e.logs.String()
			for _, want := range []string{"level=ERROR", errCallback.Error(), "callback_panic_test.go"} { // the value, and the stack
				if !strings.Contains(logs, want) {
					t.Errorf("logs lack %q:\n%s", want, logs)
				}
			}
			if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
				t.Errorf("tokens after the panic = %+v, want released", got)
			}
			if got := e.obs.callCounts(); got["release ok"] != 1 || got["commit ok"] != 0 {
				t.Errorf("database calls %v, want one release and no commit", got)
			}
			e.nothingHeld()
		})
	}
}

var errDecided = errors.New("Decided panicked")

// decidedAndReleasePanicObserver panics in Decided, and in DatabaseCall
// on the release that follows.
type decidedAndReleasePanicObserver struct{ settlePanicObserver }

func (decidedAndReleasePanicObserver) Decided([]httpadmit.LimitOutcome) { panic(errDecided) }
