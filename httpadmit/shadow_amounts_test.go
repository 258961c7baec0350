package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The log line of a shadow limit on an enforced counter writes what the
// counter would hold, and the limit, in full: a tokens limit of two
// million being tried out read "would hold 3e+06 of 2e+06".
func TestShadowRefusalLogWritesAmountsInFull(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 4_000_000, 1_500_000),
		shadow(window("api_key", key, ratelimit.MetricTokens, 2_000_000, 1_500_000)),
	))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	if logs := e.logs.String(); !strings.Contains(logs, `why="would hold 3000000 of 2000000"`) {
		t.Errorf("the shadow refusal's log line, want why=\"would hold 3000000 of 2000000\":\n%s", logs)
	}
	e.nothingHeld()
}
