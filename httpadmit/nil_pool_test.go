package httpadmit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter made from a nil pool refuses every operation as bad input (a
// *ratelimit.ValidationError on "conn"): the middleware must not pass that
// on as the client's fault (400) but answer 500, as for a limit no request
// can be decided on.
func TestLimiterOfANilPoolIsAServerError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var got error
	mw, err := httpadmit.New(ratelimit.New((*pgxpool.Pool)(nil)), fixed(window("api_key", uniqueKey("nilpool"), "requests", 10, 1)),
		httpadmit.WithObserver(e.obs), httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			httpadmit.DefaultErrorHandler(w, r, err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError || ran {
		t.Errorf("status %d (handler ran: %v), want 500 and the handler not run", rec.Code, ran)
	}
	var invalid *ratelimit.ValidationError
	if errors.Is(got, httpadmit.ErrBadRequest) || !errors.As(got, &invalid) || invalid.Field != "conn" {
		t.Errorf("error handler got %v, want the Limiter's *ratelimit.ValidationError on conn, not ErrBadRequest", got)
	}
}

// A zero Limiter (not made with ratelimit.New) refuses every operation with
// a *ratelimit.ValidationError on "Limiter": like a Limiter of a nil pool, a
// 500, not a 400, and the handler does not run. The middleware used to
// panic in Reserve.
func TestZeroLimiterIsAServerError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var got error
	mw, err := httpadmit.New(&ratelimit.Limiter{}, fixed(window("api_key", uniqueKey("zerolimiter"), "requests", 10, 1)),
		httpadmit.WithObserver(e.obs), httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			httpadmit.DefaultErrorHandler(w, r, err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	rec := httptest.NewRecorder()
	serve := func() (panicked any) {
		defer func() { panicked = recover() }()
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return nil
	}
	if p := serve(); p != nil {
		t.Fatalf("the middleware panicked: %v", p)
	}
	if rec.Code != http.StatusInternalServerError || ran {
		t.Errorf("status %d (handler ran: %v), want 500 and the handler not run", rec.Code, ran)
	}
	var invalid *ratelimit.ValidationError
	if errors.Is(got, httpadmit.ErrBadRequest) || !errors.As(got, &invalid) || invalid.Field != "Limiter" {
		t.Errorf("error handler got %v, want the Limiter's *ratelimit.ValidationError on Limiter, not ErrBadRequest", got)
	}
}
