package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A fallback route whose inner middleware has no limits for the request
// lets it through to its upstream, as one that admits it does: the outer
// admission is committed, whichever route was tried first. It used to be
// released (refused_inside) when the other route refused the request, as
// if no upstream had run. A refusal further in, behind the middleware
// without limits, still releases it; and the handler behind that
// middleware still finds the outer grant (GrantFrom).
func TestNestedRefusalThenARouteWithoutLimitsCommitsTheOuterAdmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key := uniqueKey("org"), uniqueKey("key")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	never := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Errorf("the upstream behind a full limit ran") })
	refused := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 0, 1000)))(never)
	unlimited := e.middleware(fixed()) // no limits for any request
	served := unlimited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g, ok := httpadmit.GrantFrom(r.Context()); !ok || len(g.Reservations) != 1 || g.Reservations[0].ScopeKey != org {
			t.Errorf("GrantFrom behind a middleware without limits = %+v, %v; want the outer grant", g, ok)
		}
		w.WriteHeader(http.StatusOK)
	}))
	unlimitedThenRefused := unlimited(refused)
	try := func(h http.Handler, r *http.Request, want int) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("inner route: status %d; want %d", rec.Code, want)
		}
	}
	serve := func(h http.HandlerFunc) {
		t.Helper()
		rec := httptest.NewRecorder()
		outer(h).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	}
	used := func() float64 { t.Helper(); return e.books("org", org, ratelimit.MetricTokens).Used }

	serve(func(w http.ResponseWriter, r *http.Request) {
		try(refused, r, http.StatusTooManyRequests)
		try(served, r, http.StatusOK)
	})
	if got := used(); got != 1000 {
		t.Fatalf("org tokens used after a fallback through a route without limits = %g, want 1000 (the estimate)", got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) {
		try(served, r, http.StatusOK)
		try(refused, r, http.StatusTooManyRequests)
	})
	if got := used(); got != 2000 {
		t.Fatalf("org tokens used after a route without limits then a refused one = %g, want 2000", got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { try(unlimitedThenRefused, r, http.StatusTooManyRequests) })
	if got := used(); got != 2000 {
		t.Fatalf("org tokens used after a refusal behind a middleware without limits = %g, want still 2000 (released)", got)
	}
	e.nothingHeld()
}
