package promadmit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A negative duration from a caller of the public methods (a wall clock
// stepped back) counts as zero: the histogram's _sum is a counter to
// PromQL, and a decrease would read as a reset, a spike in rate(_sum).
func TestNegativeDurationDoesNotLowerTheSum(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	m.DatabaseCall(httpadmit.OpReserve, -time.Second, nil)
	m.ObserveRecover(ratelimit.RecoveryResult{}, nil, -time.Second)
	m.ObservePrune(ratelimit.PruneResult{}, nil, -time.Second)
	page := scrape(t, reg)
	for _, op := range []string{"reserve", "recover", "prune"} {
		want := `pgadmit_db_operation_duration_seconds_sum{operation="` + op + `",result="ok"} 0`
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}
}
