package ratelimit

import "testing"

// A queue_size refusal writes the queue's limit in full: a queue of two
// million tasks read "holds 2000000 of 2e+06 tasks". (Filling such a
// queue in the database takes two million tasks, hence a unit test.)
func TestQueueExceededWritesItsLimitInFull(t *testing.T) {
	t.Parallel()
	ql := Limit{Scope: Scope{Type: "queue", Key: "q"}, Metric: MetricQueueSize, Limit: 2_000_000}
	if got, want := queueExceeded(ql, 2_000_000).Error(), "rate limit exceeded: queue queue:q holds 2000000 of 2000000 tasks; retry when one finishes"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	ql.Limit = 0
	if got, want := queueExceeded(ql, 0).Error(), "rate limit exceeded: queue_size limit 0 of queue:q admits no task"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
