package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover deletes all the queue admissions of a task a foreign writer
// finished from the page that reaches its first one, those past the page
// too: with pages of 2 and tasks of 3 admissions, every finished task's
// admissions straddle a page's end. Each is counted once, the pages after
// skip none of the live tasks' admissions (all kept) and a second run finds
// nothing.
func TestRecoverCountsAdmissionsOfFinishedTasksAcrossPagesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(2))
	queues := []ratelimit.Limit{queueLimit("a", 100), queueLimit("b", 100), queueLimit("c", 100)}
	const finished, live = 5, 4
	for i := range finished + live {
		task := startSync(t, l, time.Hour, queues...)
		if i < finished {
			if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, task.ID), Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
				t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
			}
		}
	}
	got, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if got.CleanedTaskAdmissions != 3*finished {
		t.Errorf("CleanedTaskAdmissions = %d, want %d", got.CleanedTaskAdmissions, 3*finished)
	}
	if s := summary(t, pool); s.Admissions != 3*live {
		t.Errorf("%d admissions left, want the live tasks' %d", s.Admissions, 3*live)
	}
	again, err := m.Recover(ctx)
	if err != nil || again.CleanedTaskAdmissions != 0 {
		t.Errorf("second Recover = %+v, %v; want nothing cleaned", again, err)
	}
}
