package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach of a grant of one task with no row to link (empty, or Local
// reservations only) to an attempt of another task succeeded, and returned
// the grant with the first task's TaskID and the other task's AttemptID,
// where a grant with rows is refused (ErrUnknownTask: the attempt is of
// another task than the grant). Now both are refused alike.
func TestAttachOfAGrantOfAnotherTaskWithNothingToLinkIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	start := func() ratelimit.Task {
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	mine, other := start(), start()
	grant := ratelimit.Grant{TaskID: mine.ID}
	if got, err := l.Attach(ctx, other.AttemptID, grant); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("Attach of task %s's grant to an attempt of task %s = %+v, %v; want ErrUnknownTask", mine.ID, other.ID, got, err)
	}
	if got, err := l.Attach(ctx, mine.AttemptID, grant); err != nil || got.AttemptID != mine.AttemptID || got.TaskID != mine.ID {
		t.Fatalf("Attach to its own task's attempt = %+v, %v", got, err)
	}
	var verr *ratelimit.ValidationError
	if _, err := l.Attach(ctx, mine.AttemptID, ratelimit.Grant{TaskID: "nope"}); !errors.As(err, &verr) || verr.Field != "TaskID" {
		t.Fatalf("Attach of a grant with a malformed TaskID: %v, want a *ValidationError on TaskID", err)
	}
}
