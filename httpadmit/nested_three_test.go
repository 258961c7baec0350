package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Three middlewares, the middle one with no limits for the request, the
// inner one with a Local limit on a counter the outer one limits too: the
// inner decision, admitted from this process's block, did not read the
// window, so that counter is shown with the state the outer one read (its
// RateLimit item, its x-ratelimit-*-tokens); the outer one's other limit
// stays, its state told.
func TestThreeNestedMiddlewaresWithALocalLimitInside(t *testing.T) {
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	t.Cleanup(limiter.Close)
	e := &env{t: t, pool: pool, limiter: limiter, obs: &recorder{}, logs: &lockedBuffer{}}
	key, model := uniqueKey("key"), uniqueKey("model")
	tokens := window("model", model, ratelimit.MetricTokens, 1000, 10)
	local := tokens
	local.Local = true
	outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 10, 1), tokens))
	middle := e.middleware(fixed())
	inner := e.middleware(fixed(local))
	h := outer(middle(inner(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	w := int64(longWindow / time.Second)
	if diff := cmp.Diff([]sfItem{
		{"requests", map[string]any{"q": int64(10), "w": w}},
		{"tokens", map[string]any{"q": int64(1000), "pgadmit-qu": "tokens", "w": w}},
	}, parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("RateLimit-Policy (-want +got):\n%s", diff)
	}
	got := parseList(t, rec.Header(), httpadmit.HeaderRateLimit)
	for _, it := range got {
		delete(it.Params, "t")
	}
	if diff := cmp.Diff([]sfItem{
		{"requests", map[string]any{"r": int64(9)}},
		{"tokens", map[string]any{"r": int64(990)}},
	}, got); diff != "" {
		t.Errorf("RateLimit (-want +got):\n%s", diff)
	}
	if got := rec.Header().Get("x-ratelimit-remaining-requests"); got != "9" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want 9 (the outer limit's)", got)
	}
	if got := rec.Header().Get("x-ratelimit-limit-tokens") + " " + rec.Header().Get("x-ratelimit-remaining-tokens"); got != "1000 990" {
		t.Errorf("x-ratelimit-limit/remaining-tokens = %q, want 1000 990 (as the outer decision read the counter)", got)
	}
	e.nothingHeld()
}
