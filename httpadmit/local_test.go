package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local limit admitted from this process's block did not read its
// window. The headers tell no remaining amount for it (they used to tell
// what the block had left, which fell to 0 after 50 requests of a 10,000
// quota), a shadow limit on its counter is reported admitted, and both
// have Utilization 0; a limit decided in the database keeps its state.
func TestLocalLimitHeadersTellNoBlockState(t *testing.T) {
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	t.Cleanup(limiter.Close)
	obs := &recorder{}
	e := &env{t: t, pool: pool, limiter: limiter, obs: obs, logs: &lockedBuffer{}}
	key := uniqueKey("k")
	local := window("api_key", key, ratelimit.MetricRequests, 10000, 1)
	local.Local = true
	tried := window("api_key", key, ratelimit.MetricRequests, 5, 1) // a lower limit tried out on its counter
	tokens := window("api_key", key, ratelimit.MetricTokens, 1e6, 100)
	h := e.middleware(fixed(local, shadow(tried), tokens), httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	const n = 50
	for i := range n {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
		if v := rec.Header().Get("X-Ratelimit-Remaining-Requests"); v != "" {
			t.Fatalf("request %d: X-Ratelimit-Remaining-Requests %q, want none for a Local limit", i, v)
		}
		if v := rec.Header().Get("X-Ratelimit-Remaining-Tokens"); v == "" {
			t.Fatalf("request %d: no X-Ratelimit-Remaining-Tokens", i)
		}
		if p := rec.Header().Get(httpadmit.HeaderRateLimitPolicy); !strings.Contains(p, `"requests";q=10000`) {
			t.Fatalf("request %d: RateLimit-Policy %q, want the Local limit's policy", i, p)
		}
		if s := rec.Header().Get(httpadmit.HeaderRateLimit); strings.Contains(s, `"requests"`) {
			t.Fatalf("request %d: RateLimit %q tells the Local limit's state", i, s)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.decided) != n {
		t.Fatalf("%d decisions observed, want %d", len(obs.decided), n)
	}
	for _, o := range obs.decided[n-1] {
		if o.Outcome != httpadmit.OutcomeAdmitted {
			t.Errorf("%s: %v, want admitted", o.Limit.Metric, o.Outcome)
		}
		if local := o.Limit.Metric == ratelimit.MetricRequests; local != (o.Utilization == 0) {
			t.Errorf("%s (%v): utilization %g", o.Limit.Metric, o.Limit.Mode, o.Utilization)
		}
	}
}
