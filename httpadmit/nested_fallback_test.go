package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A handler behind an outer middleware may try a route guarded by an inner
// one in-process and, refused there, serve the request another way: the
// inner default handler's release of the outer admission does not stand
// against the usage the upstream that did run reports, before or after the
// refusal. Without a report, the refusal still releases it.
func TestNestedRefusalInsideAServedRequestKeepsItsReportedUsage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key := uniqueKey("org"), uniqueKey("key")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	refused := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 0, 1000)))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Errorf("the upstream behind a full limit ran")
		}))
	tryRefusedRoute := func(r *http.Request) {
		t.Helper()
		rec := httptest.NewRecorder()
		refused.ServeHTTP(rec, r)
		if rec.Code != http.StatusTooManyRequests {
			t.Errorf("inner route: status %d; want 429", rec.Code)
		}
	}
	report := func(r *http.Request, tokens float64) {
		t.Helper()
		if err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: tokens}); err != nil {
			t.Errorf("ReportUsage: %v", err)
		}
	}
	serve := func(h http.HandlerFunc) {
		t.Helper()
		rec := httptest.NewRecorder()
		outer(h).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d %s; want 200", rec.Code, rec.Body)
		}
	}
	used := func() float64 { t.Helper(); return e.books("org", org, ratelimit.MetricTokens).Used }

	serve(func(w http.ResponseWriter, r *http.Request) { // refused, then served by another upstream
		tryRefusedRoute(r)
		report(r, 300)
	})
	if got := used(); got != 300 {
		t.Fatalf("org tokens used after a fallback that reported 300 = %g, want 300", got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { // served, then a second route refused
		report(r, 200)
		tryRefusedRoute(r)
	})
	if got := used(); got != 500 {
		t.Fatalf("org tokens used after a served request that reported 200 = %g, want 500", got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { tryRefusedRoute(r) }) // nothing served, nothing reported
	if got := used(); got != 500 {
		t.Fatalf("org tokens used after a refusal inside with no report = %g, want still 500 (released)", got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { // an explicit Discard still wins over usage
		report(r, 400)
		if err := httpadmit.Discard(r.Context(), "caller_discarded"); err != nil {
			t.Errorf("Discard: %v", err)
		}
	})
	if got := used(); got != 500 {
		t.Fatalf("org tokens used after Discard = %g, want still 500", got)
	}
	e.nothingHeld()
}

// The same fallback through a route guarded by another inner middleware
// that admits the request: the upstream behind it ran, so the outer
// admission is committed, at its estimate when nothing reports usage,
// whichever route was tried first. An inner middleware that itself
// answered nothing but released its own admission (a refusal further in)
// does not count as served.
func TestNestedRefusalThenAnotherInnerRouteCommitsTheOuterAdmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key, other := uniqueKey("org"), uniqueKey("key"), uniqueKey("other")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	never := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Errorf("the upstream behind a full limit ran") })
	refused := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 0, 1000)))(never)
	served := e.middleware(fixed(window("api_key", other, ratelimit.MetricTokens, 100_000, 1000)))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	// A middleware that admits, in front of a refusing one: nothing served.
	admitsThenRefused := e.middleware(fixed(window("api_key", other, ratelimit.MetricTokens, 100_000, 1000)))(refused)
	triesRoutes(t, e, outer, org, "another inner route", refused, served, admitsThenRefused)
	if got := e.books("api_key", other, ratelimit.MetricTokens).Used; got != 2000 {
		t.Fatalf("other key's tokens used = %g, want 2000 (its refused-inside request released)", got)
	}
	e.nothingHeld()
}

// triesRoutes stages a handler behind outer that tries two routes in
// turn, in each order, then one route where a middleware stands in front
// of a refusing one (refusedFurtherIn): the first two commit outer's
// estimate of 1000 org tokens, whichever route was tried first, and the
// last releases it.
func triesRoutes(t *testing.T, e *env, outer func(http.Handler) http.Handler, org, what string, refused, served, refusedFurtherIn http.Handler) {
	t.Helper()
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
		outer(h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	}
	used := func() float64 { t.Helper(); return e.books("org", org, ratelimit.MetricTokens).Used }

	serve(func(w http.ResponseWriter, r *http.Request) {
		try(refused, r, http.StatusTooManyRequests)
		try(served, r, http.StatusOK)
	})
	if got := used(); got != 1000 {
		t.Fatalf("org tokens used after a fallback through %s = %g, want 1000 (the estimate)", what, got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) {
		try(served, r, http.StatusOK)
		try(refused, r, http.StatusTooManyRequests)
	})
	if got := used(); got != 2000 {
		t.Fatalf("org tokens used after %s then a refused one = %g, want 2000", what, got)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { try(refusedFurtherIn, r, http.StatusTooManyRequests) })
	if got := used(); got != 2000 {
		t.Fatalf("org tokens used after a refusal behind %s = %g, want still 2000 (released)", what, got)
	}
}
