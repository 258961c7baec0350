package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// With a clock (WithClock), an event that AppendEvent writes is stamped by
// it, as the events CreateTask and FinishTask write in the same log are:
// AppendEvent stamped its event with the database's now(), so a test clock
// an hour ahead gave a log whose events went back an hour and forward
// again, in sequence order.
func TestAppendEventStampsByTheLimitersClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := &testClock{}
	c.advance(time.Hour)
	l, _ := clocked(pool, c)
	start := c.now()
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "progress", Progress: 0.5}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}
	end := c.now()
	events, err := l.TaskEvents(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 {
		t.Fatalf("events: %+v, want created, progress, finished", events)
	}
	for _, e := range events {
		// timestamptz keeps microseconds: start is truncated to compare.
		if e.CreatedAt.Before(start.Truncate(time.Microsecond)) || e.CreatedAt.After(end) {
			t.Errorf("event %d (%s) created at %v, want on the Limiter's clock, between %v and %v", e.Seq, e.Type, e.CreatedAt, start, end)
		}
	}
}
