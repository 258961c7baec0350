package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A shadow limit on the counter of an enforced limit whose Amount is zero
// (not reserved: no estimate for this request) is reserved on its own. The
// enforced limit's headers must not show the shadow reservation's state as
// its own: clients never see shadow limits, and the quota the headers tell
// is the enforced one's.
func TestShadowOnAZeroAmountEnforcedCounterIsNotShown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 1000, 0),
		shadow(window("api_key", key, ratelimit.MetricTokens, 100, 40)),
	), httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI))
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d %s", rec.Code, rec.Body)
	}
	h := rec.Header()
	if got := h.Get("x-ratelimit-limit-tokens"); got != "" && got != "1000" {
		t.Errorf("x-ratelimit-limit-tokens = %q: the shadow limit's quota, where the enforced one's is 1000 (headers %v)", got, h)
	}
	for _, it := range parseList(t, h, httpadmit.HeaderRateLimit) {
		if r, _ := it.Params["r"].(int64); it.Name == "tokens" && r < 900 {
			t.Errorf("RateLimit tokens r=%d: the shadow limit's remaining (quota 100), not the enforced one's (quota 1000); headers %v", r, h)
		}
	}
	e.nothingHeld()
}
