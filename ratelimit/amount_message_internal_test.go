package ratelimit

import (
	"testing"

	"github.com/pgadmit/pgadmit/db"
)

// A queue_size refusal writes the queue's limit in full: a queue of two
// million tasks read "holds 2000000 of 2e+06 tasks". (Filling such a
// queue in the database takes two million tasks, hence a unit test.)
func TestQueueExceededWritesItsLimitInFull(t *testing.T) {
	t.Parallel()
	ql := Limit{Scope: Scope{Type: "queue", Key: "q"}, Metric: MetricQueueSize, Limit: 2_000_000}
	if got, want := queueExceeded(ql, 2_000_000).Error(), "rate limit exceeded: queue queue:q holds 2000000 of 2000000 tasks; retry when one finishes"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// A queue of one task, in the singular.
	ql.Limit = 1
	if got, want := queueExceeded(ql, 1).Error(), "rate limit exceeded: queue queue:q holds 1 of 1 task; retry when one finishes"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	ql.Limit = 0
	if got, want := queueExceeded(ql, 0).Error(), "rate limit exceeded: queue_size limit 0 of queue:q admits no task"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// A concurrent refusal's Projected is numeric's sum of what is active and
// the request, as a window refusal's Current and Projected are: 0.1 slots
// active plus a request of 0.2 projected 0.30000000000000004.
func TestLeaseExceededProjectsExactly(t *testing.T) {
	t.Parallel()
	c := leaseLimit{Limit: Limit{Scope: Scope{Type: "model", Key: "m"}, Metric: MetricConcurrent, Limit: 0.25, Amount: 0.2}}
	e := leaseExceeded(c, db.AdmissionReserveRow{CurrentValue: 0.1})
	if e.Projected != 0.3 || e.Remaining() != 0.15 || e.RemainingText() != "0.15" {
		t.Errorf("Projected %v, Remaining %v (%q); want 0.3 and 0.15", e.Projected, e.Remaining(), e.RemainingText())
	}
}
