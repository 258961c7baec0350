package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Two middlewares on one request (one for every route, one for a route's
// own limits): what the handler reports, and its Discard, settle the
// requests of both, not of the innermost only, which used to leave the
// outer one committed at its estimates.
func TestNestedMiddlewaresBothTakeTheReport(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key := uniqueKey("org"), uniqueKey("key")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	inner := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 100_000, 1000)))
	serve := func(h http.HandlerFunc) {
		t.Helper()
		rec := httptest.NewRecorder()
		outer(inner(h)).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}

	serve(func(w http.ResponseWriter, r *http.Request) {
		if err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
			t.Errorf("ReportUsage: %v", err)
		}
	})
	for _, scope := range []struct{ typ, key string }{{"org", org}, {"api_key", key}} {
		if got, want := e.books(scope.typ, scope.key, ratelimit.MetricTokens), (book{Used: 420}); got != want {
			t.Errorf("%s tokens after a report of 420 = %+v, want %+v", scope.typ, got, want)
		}
	}

	serve(func(w http.ResponseWriter, r *http.Request) {
		if err := httpadmit.Discard(r.Context(), "upstream_failed"); err != nil {
			t.Errorf("Discard: %v", err)
		}
	})
	for _, scope := range []struct{ typ, key string }{{"org", org}, {"api_key", key}} {
		if got, want := e.books(scope.typ, scope.key, ratelimit.MetricTokens), (book{Used: 420}); got != want {
			t.Errorf("%s tokens after a discarded request = %+v, want %+v (released)", scope.typ, got, want)
		}
	}
	e.nothingHeld()
}
