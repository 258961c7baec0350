package httpadmit_test

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal's detail writes its amounts in full, as the JSON members and
// the headers do: a tokens quota of two million (a common tokens-a-minute
// limit) read "of 2e+06", and a cost of 0.00001 read "needs 1e-05".
func TestRefusalDetailWritesAmountsWithoutAnExponent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy string
		e      ratelimit.ExceededError
		want   string
	}{
		{"tokens", ratelimit.ExceededError{Metric: ratelimit.MetricTokens, Limit: 2_000_000, Current: 1_999_000, Amount: 4096,
			WindowSeconds: 60, RetryAfter: 20 * time.Second, Retryable: true},
			"tokens: the request needs 4096, 1000 of 2000000 left in this window of 1m; retry after 20s"},
		{"cost", ratelimit.ExceededError{Metric: "cost", Limit: 0.00005, Current: 0.00005, Amount: 0.00001,
			WindowSeconds: 60, RetryAfter: 20 * time.Second, Retryable: true},
			"cost: the request needs 0.00001, 0 of 0.00005 left in this window of 1m; retry after 20s"},
		{"tokens", ratelimit.ExceededError{Metric: ratelimit.MetricTokens, Limit: 1_000_000, Amount: 1_500_000, WindowSeconds: 60},
			"tokens: the request needs 1500000, more than the whole quota of 1000000; retrying cannot help"},
		{"concurrent", ratelimit.ExceededError{Metric: ratelimit.MetricConcurrent, Limit: 1e7, Current: 1e7, Amount: 1,
			RetryAfter: 5 * time.Second, Retryable: true},
			"concurrent: the request needs 1, 0 of 10000000 left in flight; retry after 5s"},
	} {
		p := httpadmit.RefusalProblem(&httpadmit.Refusal{Policy: c.policy, Exceeded: &c.e})
		if p.Detail != c.want {
			t.Errorf("detail %q\nwant   %q", p.Detail, c.want)
		}
	}
}
