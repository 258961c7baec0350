package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// TaskEvents and TaskAttempts of an id that names no task (a typo, or a
// task Prune deleted) returned an empty list and no error, as for a task
// without events or attempts: a caller polling them could not tell the
// task was gone. Now they return ErrUnknownTask, as GetTask does, and
// still an empty list for a task that has none (a queued task's attempts).
func TestTaskEventsAndAttemptsOfAnUnknownTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	const ghost = "00000000-0000-4000-8000-000000000000"
	if events, err := l.TaskEvents(ctx, ghost); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Errorf("TaskEvents(unknown) = %v, %v; want ErrUnknownTask", events, err)
	}
	if attempts, err := l.TaskAttempts(ctx, ghost); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Errorf("TaskAttempts(unknown) = %v, %v; want ErrUnknownTask", attempts, err)
	}
	queued := createAsync(t, l)
	if attempts, err := l.TaskAttempts(ctx, queued.ID); err != nil || len(attempts) != 0 {
		t.Errorf("TaskAttempts(queued) = %v, %v; want none and no error", attempts, err)
	}
	if events, err := l.TaskEvents(ctx, queued.ID); err != nil || len(events) != 1 {
		t.Errorf("TaskEvents(queued) = %v, %v; want its creation event", events, err)
	}
}
