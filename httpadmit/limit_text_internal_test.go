package httpadmit

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A limit's key, which a *ValidationError about two limits on one counter
// shows, shows its scope as inspect and Doctor do (textcell.Scope): type
// "tier:gold" with key "c" and type "tier" with key "gold:c" were both
// tier:gold:c. A plain scope is shown as it always was.
func TestKeyStringShowsScopeUnambiguously(t *testing.T) {
	t.Parallel()
	of := func(typ, key, metric string) string {
		return keyOf(ratelimit.Limit{Scope: ratelimit.Scope{Type: typ, Key: key}, Metric: metric, Window: time.Minute}).String()
	}
	for _, tc := range []struct{ typ, key, metric, want string }{
		{"api_key", "abc", "requests", "api_key:abc requests/1m0s"},
		{"api_key", "abc", ratelimit.MetricConcurrent, "api_key:abc concurrent"},
		{"tier:gold", "c", "requests", `"tier:gold":c requests/1m0s`},
		{"tier", "gold:c", "requests", "tier:gold:c requests/1m0s"},
		{"api_key", "team a", "requests", `api_key:"team a" requests/1m0s`},
		{"api_key", "a", "x requests", `api_key:a "x requests"/1m0s`},
	} {
		if got := of(tc.typ, tc.key, tc.metric); got != tc.want {
			t.Errorf("key of %q %q %q: %s, want %s", tc.typ, tc.key, tc.metric, got, tc.want)
		}
	}
}
