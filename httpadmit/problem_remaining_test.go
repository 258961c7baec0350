package httpadmit_test

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal's Remaining and detail tell what the limit had left exactly,
// as Quota and Requested keep their fractions: a cost limit of 2.5 with
// 0.7 left read "0 left" (rounded down to a whole number, as the headers'
// remaining values are), which a fractional limit cannot take as meant,
// and one of 0.3 with 0.2 used has 0.1 left, not float64's
// 0.09999999999999998.
func TestRefusalRemainingIsExact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit, current, remaining float64
		detail                    string
	}{
		{2.5, 1.8, 0.7, "cost: the request needs 1, 0.7 of 2.5 left in this window of 1h; retry after 10s"},
		{0.3, 0.2, 0.1, "cost: the request needs 1, 0.1 of 0.3 left in this window of 1h; retry after 10s"},
		{3, 3, 0, "cost: the request needs 1, 0 of 3 left in this window of 1h; retry after 10s"},
	} {
		p := httpadmit.RefusalProblem(&httpadmit.Refusal{Policy: "cost", Exceeded: &ratelimit.ExceededError{
			Metric: "cost", Limit: c.limit, Current: c.current, Amount: 1,
			WindowSeconds: 3600, RetryAfter: 10 * time.Second, Retryable: true,
		}})
		if p.Remaining == nil || *p.Remaining != c.remaining || p.Quota == nil || *p.Quota != c.limit || p.Requested == nil || *p.Requested != 1 {
			t.Errorf("limit %v, current %v: remaining %v, quota %v, requested %v; want %v, %v and 1",
				c.limit, c.current, deref(p.Remaining), deref(p.Quota), deref(p.Requested), c.remaining, c.limit)
		}
		if p.Detail != c.detail {
			t.Errorf("detail %q, want %q", p.Detail, c.detail)
		}
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
