package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// lockTimedOutErr is the server's error for a statement that waited past lock_timeout.
var lockTimedOutErr = &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}

// A step that left rows (behind a lock, or rejected by the server) and is
// then cut off by another error in a later batch still reports what it
// left, beside that error: a run's error must not read as if the rows
// were done.
func TestFindStepKeepsWhatItLeftWhenALaterBatchFails(t *testing.T) {
	lost := errors.New("connection lost")
	for _, tc := range []struct {
		name     string
		bad      []int // rows the server rejects
		lockOnce bool  // the first act times out on a lock
		failFind bool  // the failure comes from find, not act
		wantLeft string
	}{
		{name: "lock wait, then act fails", lockOnce: true, wantLeft: "left 4 rows: another transaction held a lock"},
		{name: "lock wait, then find fails", lockOnce: true, failFind: true, wantLeft: "left 4 rows: another transaction held a lock"},
		{name: "rejected row, then act fails", bad: []int{1}, wantLeft: "left 1 row the server rejected"},
		{name: "rejected row, then find fails", bad: []int{1}, failFind: true, wantLeft: "left 1 row the server rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := newRowTable(20, tc.bad...)
			batches := 0
			find := func(limit int32) ([]int, error) {
				if batches++; tc.failFind && batches == 3 {
					return nil, lost
				}
				return table.find(limit)
			}
			acts := 0
			act := func(rows []int) (int64, error) {
				switch acts++; {
				case tc.lockOnce && acts == 1:
					return 0, lockTimedOutErr
				case !tc.failFind && batches == 3:
					return 0, lost
				}
				return table.act(rows)
			}
			err := runStep(t, findStep(4, nil, rowID, find, act))
			if !errors.Is(err, lost) {
				t.Errorf("step error %v, want the failure of its third batch", err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantLeft) {
				t.Errorf("step error %v, want it to say %q", err, tc.wantLeft)
			}
			var lw *LockWaitError
			if got := errors.As(err, &lw); got != tc.lockOnce {
				t.Errorf("errors.As(%v, *LockWaitError) = %v, want %v", err, got, tc.lockOnce)
			} else if got && lw.Rows != 4 {
				t.Errorf("LockWaitError.Rows = %d, want 4 (the first batch)", lw.Rows)
			}
		})
	}
}

// What a step left beside the error that cut it off does not make that
// error the server's rejection of a statement: a lost connection still
// stops the run rather than going on to the next step.
func TestRunStepsStopsAtALostConnectionAfterALockWait(t *testing.T) {
	lost := errors.New("connection lost")
	table := newRowTable(20)
	acts := 0
	first := findStep(4, nil, rowID, table.find, func(rows []int) (int64, error) {
		switch acts++; acts {
		case 1:
			return 0, lockTimedOutErr
		case 2:
			return table.act(rows)
		}
		return 0, lost
	})
	nextRan := false
	lease := &jobLease{m: &Maintenance{opts: maintenanceOptions{leaseTTL: time.Hour}}, renewed: time.Now()}
	err := runSteps(context.Background(), "recover", lease, []step{
		{"first", first},
		{"next", func(error) (bool, bool, error) { nextRan = true; return false, true, nil }},
	}, nil)
	if nextRan {
		t.Errorf("the next step ran after %v, want the run stopped at the lost connection", err)
	}
	var lw *LockWaitError
	if !errors.Is(err, lost) || !errors.As(err, &lw) || lw.Job != "recover" || lw.Step != "first" {
		t.Errorf("run error %v, want the lost connection and the step's LockWaitError (recover, first)", err)
	}
}

// So when ctx ends between two batches of a step: runSteps stops before
// the next batch, and the step's error still holds what it had left.
func TestRunStepsKeepsWhatAStepLeftWhenCtxEndsBetweenBatches(t *testing.T) {
	table := newRowTable(20)
	acts := 0
	first := findStep(4, nil, rowID, table.find, func(rows []int) (int64, error) {
		if acts++; acts == 1 {
			return 0, lockTimedOutErr
		}
		return table.act(rows)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease := &jobLease{m: &Maintenance{opts: maintenanceOptions{leaseTTL: time.Hour}}, renewed: time.Now()}
	err := runSteps(ctx, "prune", lease, []step{{"first", first}}, func(string, []string) { cancel() }) // after the second batch
	var lw *LockWaitError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &lw) || lw.Rows != 4 || lw.Job != "prune" || lw.Step != "first" {
		t.Errorf("run error %v, want ctx's and a LockWaitError (prune, first) for the 4 rows of the first batch", err)
	}
	if acts != 2 {
		t.Errorf("%d acts, want 2: no batch after ctx ended", acts)
	}
}
