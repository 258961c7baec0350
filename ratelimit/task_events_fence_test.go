package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// AppendEvent is fenced by the execution token, as HeartbeatTask and
// FinishTask are: a worker whose claim was taken away (recovery requeued
// the task and another worker claimed it, or the task finished) gets a
// *StaleTokenError and appends nothing, instead of writing into the log of
// the claim that replaced it.
func TestAppendEventRefusesALostClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)

	task := createAsync(t, l)
	lost := claim(t, l, "w-lost", time.Second)
	clock.pass(lost.LeaseExpiresAt)
	if _, err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	requeued := getTask(t, l, task.ID)
	// Reclaimed and not yet claimed again: the task is queued.
	_, err := l.AppendEvent(ctx, task.ID, lost.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 1})
	if stale := asStaleOrNil(t, err); stale == nil || stale.Status != ratelimit.TaskQueued {
		t.Fatalf("AppendEvent by the reclaimed worker, task queued: err = %v, want a *StaleTokenError with status queued", err)
	}
	owner := claim(t, l, "w-owner", time.Minute)
	_, err = l.AppendEvent(ctx, task.ID, lost.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 2})
	if stale := asStaleOrNil(t, err); stale == nil || stale.Status != ratelimit.TaskRunning {
		t.Fatalf("AppendEvent by the reclaimed worker, task claimed again: err = %v, want a *StaleTokenError with status running", err)
	}
	if _, err := l.AppendEvent(ctx, owner.ID, owner.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 3}); err != nil {
		t.Fatalf("AppendEvent by the owner: %v", err)
	}
	if _, err := l.FinishTask(ctx, owner.ID, owner.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	_, err = l.AppendEvent(ctx, owner.ID, owner.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 4})
	if stale := asStaleOrNil(t, err); stale == nil || stale.Status != ratelimit.TaskSucceeded {
		t.Fatalf("AppendEvent by the owner after finishing: err = %v, want a *StaleTokenError with status succeeded", err)
	}

	want := []string{"task.queued", "task.running", "task.queued", "task.running", "task.progress", "task.completed"}
	if got := eventTypes(t, l, task.ID); !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v (only the owner's progress)", got, want)
	}
	if got := getTask(t, l, task.ID).LastEventSeq; got != len(want) || requeued.LastEventSeq != 3 {
		t.Fatalf("last_event_seq = %d (after requeue %d), want %d (3)", got, requeued.LastEventSeq, len(want))
	}
}

// asStaleOrNil returns err as a *StaleTokenError, or nil when it is not one.
func asStaleOrNil(t *testing.T, err error) *ratelimit.StaleTokenError {
	t.Helper()
	var stale *ratelimit.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, ratelimit.ErrStaleToken) {
		return nil
	}
	return stale
}
