package httpadmit_test

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal's Remaining is rounded down to a whole number, as the headers'
// remaining values are, while Quota and Requested keep their fractions: a
// cost limit of 2.5 with 0.7 left reads 0 left.
func TestRefusalRemainingIsWhole(t *testing.T) {
	t.Parallel()
	p := httpadmit.RefusalProblem(&httpadmit.Refusal{Policy: "cost", Exceeded: &ratelimit.ExceededError{
		Metric: "cost", Limit: 2.5, Current: 1.8, Amount: 1,
		WindowSeconds: 3600, RetryAfter: 10 * time.Second, Retryable: true,
	}})
	if p.Remaining == nil || *p.Remaining != 0 || p.Quota == nil || *p.Quota != 2.5 || p.Requested == nil || *p.Requested != 1 {
		t.Errorf("remaining %v, quota %v, requested %v; want 0, 2.5 and 1", deref(p.Remaining), deref(p.Quota), deref(p.Requested))
	}
	if want := "cost: the request needs 1, 0 of 2.5 left in this window of 1h; retry after 10s"; p.Detail != want {
		t.Errorf("detail %q, want %q", p.Detail, want)
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
