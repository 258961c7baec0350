package httpadmit_test

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal's detail names its window as an operator writes it (24h, 1m,
// 90s), not as Go's Duration.String does (24h0m0s, 1m0s, 1m30s).
func TestRefusalDetailWritesTheWindowAsItIsWritten(t *testing.T) {
	t.Parallel()
	for window, want := range map[time.Duration]string{
		24 * time.Hour:   "requests: the request needs 1, 0 of 3 left in this window of 24h; retry after 35s",
		time.Minute:      "requests: the request needs 1, 0 of 3 left in this window of 1m; retry after 35s",
		90 * time.Second: "requests: the request needs 1, 0 of 3 left in this window of 1m30s; retry after 35s",
	} {
		p := httpadmit.RefusalProblem(&httpadmit.Refusal{Policy: "requests", Exceeded: &ratelimit.ExceededError{
			Metric: ratelimit.MetricRequests, Limit: 3, Current: 3, Amount: 1,
			WindowSeconds: int(window / time.Second), RetryAfter: 34881 * time.Millisecond, Retryable: true,
		}})
		if p.Detail != want {
			t.Errorf("window %s: detail %q, want %q", window, p.Detail, want)
		}
	}
}
