package httpadmit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A request whose context ended before its admission was decided (its
// client left while the LimitsFunc read the body, its deadline passed) is
// neither reserved nor served: the middleware detaches its statements from
// the request's context, and it reserved the request, ran the handler on a
// dead context and released it, two round trips for nothing. The error
// handler gets ErrRequestEnded with the context's error; the Observer is
// told of no decision and no database call.
func TestRequestEndedBeforeAdmissionIsNotReserved(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Second)
	for _, c := range []struct {
		name   string
		ctx    func() context.Context
		cause  error
		status int
	}{
		{"client gone", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled, httpadmit.StatusClientClosedRequest},
		{"deadline passed", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), past)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded, http.StatusServiceUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("k")
			var got error
			mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)),
				httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
					got = err
					httpadmit.DefaultErrorHandler(w, r, err)
				}))
			ran := false
			rec := httptest.NewRecorder()
			mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).
				ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil).WithContext(c.ctx()))
			if ran {
				t.Error("the handler ran")
			}
			if !errors.Is(got, httpadmit.ErrRequestEnded) || !errors.Is(got, c.cause) {
				t.Errorf("error handler got %v, want ErrRequestEnded and %v", got, c.cause)
			}
			if rec.Code != c.status {
				t.Errorf("status %d, want %d", rec.Code, c.status)
			}
			rows, err := testq.ReservationsByReason(context.Background(), e.pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 0 {
				t.Errorf("reservations %+v, want none", rows)
			}
			if got := e.books("api_key", key, ratelimit.MetricRequests); got != (book{}) {
				t.Errorf("requests = %+v, want nothing counted", got)
			}
			if calls, decided := e.obs.callCounts(), e.obs.outcomes(); len(calls) != 0 || len(decided) != 0 {
				t.Errorf("observed calls %v and outcomes %v, want none", calls, decided)
			}
			e.nothingHeld()
		})
	}
}

// Behind another middleware that admitted the request before its client
// left, the inner one reserves nothing and the outer one releases its
// admission as client_disconnected.
func TestRequestEndedBetweenMiddlewares(t *testing.T) {
	t.Parallel()
	e := setup(t)
	outerKey, innerKey := uniqueKey("k"), uniqueKey("k")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := false
	inner := e.middleware(fixed(window("api_key", innerKey, ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	leave := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the client leaves once the outer middleware admitted the request
		inner.ServeHTTP(w, r)
	})
	e.middleware(fixed(window("api_key", outerKey, ratelimit.MetricRequests, 100, 1)))(leave).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx))
	if ran {
		t.Error("the handler ran")
	}
	e.releasedAs(outerKey, httpadmit.ReasonClientDisconnected)
	rows, err := testq.ReservationsByReason(context.Background(), e.pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: innerKey})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Errorf("inner reservations %+v, want none", rows)
	}
	e.nothingHeld()
}

// A request with nothing to reserve (no limits, or only limits with a zero
// amount) goes to the handler whatever its context, as it would without
// the middleware: ErrRequestEnded spares the two round trips of reserving
// and releasing a request nobody waits for, which such a request does not
// cost, and the middleware does not answer requests it does not limit.
// The handler sees the context ended.
func TestRequestEndedWithNothingToReserveIsServed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("k")
	for name, limits := range map[string][]httpadmit.Limit{
		"no limits":   nil,
		"zero amount": {window("api_key", key, ratelimit.MetricRequests, 100, 0)},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var seen error
		mw := e.middleware(fixed(limits...), httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			t.Errorf("%s: error handler got %v, want the handler to run", name, err)
		}))
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Context().Err() })).
			ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx))
		if !errors.Is(seen, context.Canceled) {
			t.Errorf("%s: the handler saw %v, want context.Canceled (did it run?)", name, seen)
		}
	}
	if calls := e.obs.callCounts(); len(calls) != 0 {
		t.Errorf("database calls %v, want none", calls)
	}
	e.nothingHeld()
}
