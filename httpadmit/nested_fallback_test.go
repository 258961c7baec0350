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
