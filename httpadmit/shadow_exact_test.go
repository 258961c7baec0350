package httpadmit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A shadow limit on an enforced counter is judged from what the counter
// holds, exactly: a shadow limit of 0.1 that would hold 0.1 admits,
// where float64's 0.4 - 0.3 - 0.1 + 0.1 (0.10000000000000003) reported it
// refused and logged "would hold 0.10000000000000003 of 0.1". Its
// Utilization, and the enforced limits', are exact ratios: 1.17 of 1.3
// is 0.9 (a near-limit threshold of 0.9 counts it), where float64's
// (1.3 - 0.13) / 1.3 is 0.8999999999999999.
func TestShadowOnAnEnforcedCounterIsJudgedExactly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, team := uniqueKey("key"), uniqueKey("team")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 0.4, 0.1),
		shadow(window("api_key", key, ratelimit.MetricTokens, 0.1, 0.1)),
		window("team", team, "cost", 1.3, 1.17),
	))
	serveOnce(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	e.obs.mu.Lock()
	got := map[string]float64{}
	for _, d := range e.obs.decided {
		for _, o := range d {
			got[string(o.Outcome)+" "+o.Limit.Mode.String()+" "+o.Limit.Scope.Type] = o.Utilization
		}
	}
	e.obs.mu.Unlock()
	want := map[string]float64{"admitted enforce api_key": 0.25, "admitted shadow api_key": 1, "admitted enforce team": 0.9}
	if len(got) != len(want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	for k, u := range want {
		if g, ok := got[k]; !ok || g != u {
			t.Errorf("outcome %q: utilization %v (told: %t), want %v; all %v", k, g, ok, u, got)
		}
	}
	if logs := e.logs.String(); strings.Contains(logs, "would refuse") {
		t.Errorf("a shadow refusal was logged:\n%s", logs)
	}
	e.nothingHeld()
}
