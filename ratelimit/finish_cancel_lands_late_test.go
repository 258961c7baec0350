package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A batch of FinishTask or CancelTask whose caller left, still waiting for
// the task row when the grace ends, is cancelled; when the row is freed
// after that but before pgx's cancel request reaches the server, the batch
// commits: the task ends, and a Reserve for the task that committed while
// the batch waited (a late reservation, which only the batch's answer
// names) would be left open on the finished task until Recover. On a pool
// set up with ConfigurePool, pgx reads the pipelined batch's answer after
// the cancel, as it does a single statement's (cache_statement's pipeline
// and exec's batch alike), and the late reservation is released as the
// answer says. With pgx's default the connection is given up unread, and
// the caller gets no FinishResult; once pgx has closed that connection
// (the server has ended the batch's transaction), the task's open
// reservations are released if it has ended. They stayed open until
// Recover so: the default's subtests failed before.
func TestTaskEndBatchThatCommitsBeforeItsCancelLands(t *testing.T) {
	t.Parallel()
	pools := []struct {
		name      string
		configure func(*pgxpool.Config)
		answered  bool // the caller gets the batch's answer
	}{
		{"ConfigurePool", ratelimit.ConfigurePool, true},
		{"pgx's default", func(*pgxpool.Config) {}, false},
	}
	for _, e := range taskEnds {
		for _, pc := range pools {
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
				t.Run(e.name+"/"+pc.name+"/"+mode.String(), func(t *testing.T) {
					t.Parallel()
					pool := pgtest.NewPool(t)
					slow, slowOn := slowDials(t, pool, cancelLandsLate, func(cfg *pgxpool.Config) {
						pc.configure(cfg)
						cfg.ConnConfig.DefaultQueryExecMode = mode
					})
					l := ratelimit.New(slow, ratelimit.WithLeftStatementGrace(cancelGrace))
					key := uniqueKey("late")
					task, res, err := endThenUnblockBeforeTheCancelLands(t, pool, l, key, slowOn, e)
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("%s after its caller left: %+v, %v; want context.Canceled", e.name, res, err)
					}
					want := ratelimit.Task{}
					if pc.answered {
						want = ratelimit.Task{ID: task.ID, Status: e.status}
					}
					if res.Task.ID != want.ID || res.Task.Status != want.Status {
						t.Errorf("%s after its caller left gave the task %q %q; want %q %q", e.name, res.Task.ID, res.Task.Status, want.ID, want.Status)
					}
					assertNothingHeld(t, pool, "api_key", key)
					if rec, err := ratelimit.NewMaintenance(pool).Recover(context.Background()); err != nil || rec.ReleasedRateReservations != 0 {
						t.Fatalf("Recover = %+v, %v; want nothing left for it to release", rec, err)
					}
					assertDoctorOK(t, pool)
				})
			}
		}
	}
}

// cancelGrace is the grace of the Limiters of these tests; cancelLandsLate
// how late their cancel requests land, yet before ConfigurePool's
// connection gives up waiting for the acknowledgement (1 s).
const cancelGrace, cancelLandsLate = 50 * time.Millisecond, 600 * time.Millisecond

// taskEnd is FinishTask or CancelTask, with how to make a task it ends,
// the status it ends it with, and how the ops summary shows it ended. end
// sends msg as the outcome's error message or the cancel's reason.
type taskEnd struct {
	name   string
	status string
	create func(*testing.T, *ratelimit.Limiter) ratelimit.Task
	end    func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, msg string) (ratelimit.FinishResult, error)
	ended  func(dbtest.OpsStateSummaryRow) bool
}

var taskEnds = []taskEnd{
	{
		name: "FinishTask", status: ratelimit.TaskFailed,
		create: func(t *testing.T, l *ratelimit.Limiter) ratelimit.Task { return startSync(t, l, time.Hour) },
		end: func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, msg string) (ratelimit.FinishResult, error) {
			return l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorMessage: msg})
		},
		ended: func(s dbtest.OpsStateSummaryRow) bool { return s.TasksFailed == 1 },
	},
	{
		name: "CancelTask", status: ratelimit.TaskCancelled,
		create: func(t *testing.T, l *ratelimit.Limiter) ratelimit.Task { return createAsync(t, l) },
		end: func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, msg string) (ratelimit.FinishResult, error) {
			return l.CancelTask(ctx, task.ID, msg)
		},
		ended: func(s dbtest.OpsStateSummaryRow) bool { return s.TasksCancelled == 1 },
	},
}

// endThenUnblockBeforeTheCancelLands creates a task, has a transaction of
// its own reserve on key for it (a late reservation: the end's first read
// cannot see it, and its batch waits for the task row), ends the task with
// l in a context that ends while the batch waits, with slow set (the
// cancel request will land cancelLandsLate late), commits the transaction
// after the grace, before the request lands, and waits for it to land.
// It returns what the end returned, once l is closed, and checks that the
// task ended (its batch committed).
func endThenUnblockBeforeTheCancelLands(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, key string, slow interface{ Store(bool) }, e taskEnd) (ratelimit.Task, ratelimit.FinishResult, error) {
	t.Helper()
	ctx := context.Background()
	direct := ratelimit.New(pool)
	defer direct.Close()
	task, tx, leave, done := endBehindALateReserve(t, pool, direct, l, key, e.create, e.end, "", e.name+"'s batch")
	defer leave()
	slow.Store(true)
	leave()
	time.Sleep(cancelGrace + 400*time.Millisecond) // the batch is being cancelled
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the Reserve: %v", err)
	}
	got := <-done
	time.Sleep(cancelLandsLate + 300*time.Millisecond) // the cancel request lands
	slow.Store(false)
	l.Close() // waits for what runs in the background

	if read := getTask(t, direct, task.ID); read.Status != e.status {
		t.Fatalf("task after its batch committed before the cancel landed: %s; want %s", read.Status, e.status)
	}
	return task, got.res, got.err
}
