package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Attach of a grant with no row to link (empty, or Local reservations
// only, as a gateway whose limits are all Local gets) checks the attempt
// and joins its task, as the documentation says of any grant. It used to
// return the grant with AttemptID set at once: an attempt that names no
// row, or no longer runs, was accepted, and TaskID stayed empty.
func TestAttachOfAGrantWithNothingToLinkChecksTheAttempt(t *testing.T) {
	t.Parallel()
	l, _, hour := localLimiter(t)
	ctx := context.Background()
	const unknown = "123e4567-e89b-12d3-a456-426614174000"
	local := reserveLocal(t, l, hour, uniqueKey("attachlocal"), 1000, 1)
	for name, g := range map[string]ratelimit.Grant{"empty": {}, "Local only": local} {
		if _, err := l.Attach(ctx, unknown, g); !errors.Is(err, ratelimit.ErrUnknownTask) {
			t.Errorf("%s grant, unknown attempt: err = %v, want ErrUnknownTask", name, err)
		}
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		attached, err := l.Attach(ctx, task.AttemptID, g)
		if err != nil || attached.AttemptID != task.AttemptID || attached.TaskID != task.ID {
			t.Errorf("%s grant, running attempt: %+v, %v; want AttemptID %s and TaskID %s", name, attached, err, task.AttemptID, task.ID)
		}
		if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Attach(ctx, task.AttemptID, g); !errors.Is(err, ratelimit.ErrTaskFinished) {
			t.Errorf("%s grant, finished attempt: err = %v, want ErrTaskFinished", name, err)
		}
	}
}
