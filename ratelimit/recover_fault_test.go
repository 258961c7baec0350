package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Fault tests: the connection under an admission, a settlement or a finish
// is terminated by the server (pg_terminate_backend) mid-transaction. The
// caller gets a typed error, nothing is half-written, the doctor is clean,
// and recovery gives back what the task held once its lease expires.

func faultLimits(key string) []ratelimit.Limit {
	requests := window("api_key", key, ratelimit.MetricRequests, 100, 1)
	tokens := window("api_key", key, ratelimit.MetricTokens, 10000, 500)
	// Windows of a week: a test's reservations and the rows another
	// transaction holds must fall in the same window, which a one-minute
	// window breaks when the test runs across a minute's end.
	requests.Window, tokens.Window = 7*24*time.Hour, 7*24*time.Hour
	return []ratelimit.Limit{requests, tokens, concurrent("model", key, 10)}
}

// assertTerminated checks that err is the server's admin_shutdown error
// (57P01), wrapped so that errors.As finds it.
func assertTerminated(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57P01" {
		t.Fatalf("%s: error %v (%T), want the server's admin_shutdown (57P01)", what, err, err)
	}
}

// terminate kills the backend pid from another session.
func terminate(t *testing.T, conn db.DBTX, pid int32) {
	t.Helper()
	ok, err := testq.OpsTerminateBackend(context.Background(), conn, pid)
	if err != nil || !ok {
		t.Fatalf("OpsTerminateBackend(%d) = %v, %v", pid, ok, err)
	}
}

// beginWithPid opens a transaction on pool and returns it with its backend.
func beginWithPid(t *testing.T, pool *pgxpool.Pool) (pgx.Tx, int32) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	pid, err := testq.OpsBackendPid(ctx, tx)
	if err != nil {
		t.Fatalf("OpsBackendPid: %v", err)
	}
	return tx, pid
}

func TestFaultTerminatedBeforeCommitOfCallersAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	var clock testClock
	l, m := clocked(pools[0], &clock)
	key := uniqueKey("k")
	task := startSync(t, l, time.Second, queueLimit("q", 10))
	before := rowCounts(t, pools[1])

	// The caller admits inside its own transaction: reserve, then create a
	// follow-up task; the connection dies before COMMIT.
	tx, pid := beginWithPid(t, pools[0])
	inTx := l.WithTx(tx)
	if _, err := inTx.Reserve(ctx, task.ID, task.AttemptID, faultLimits(key)); err != nil {
		t.Fatalf("Reserve in tx: %v", err)
	}
	if _, err := inTx.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("q", 10)}}); err != nil {
		t.Fatalf("CreateTask in tx: %v", err)
	}
	terminate(t, pools[1], pid)
	assertTerminated(t, "COMMIT", tx.Commit(ctx))

	if diff := cmp.Diff(before, rowCounts(t, pools[1])); diff != "" {
		t.Fatalf("a terminated admission left rows (-before +after):\n%s", diff)
	}
	assertDoctorOK(t, pools[1])
	// The pool replaces the dead connection; admission works at once.
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, faultLimits(key)); err != nil {
		t.Fatalf("Reserve after the fault: %v", err)
	}
	clock.pass(task.LeaseExpiresAt)
	recoverOnce(t, m, ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 2, FailedAttempts: 1, FailedTasks: 1, CleanedTaskAdmissions: 1})
	assertDoctorOK(t, pools[1])
}

func TestFaultTerminatedBeforeCommitOfCallersSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	var clock testClock
	l, m := clocked(pools[0], &clock)
	key := uniqueKey("k")
	task := startSync(t, l, time.Second, queueLimit("q", 10))
	grant, err := l.Reserve(ctx, task.ID, task.AttemptID, faultLimits(key))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	before := summary(t, pools[1])

	// Commit of the actual usage and the task's finish, in the caller's
	// transaction; the connection dies before COMMIT.
	tx, pid := beginWithPid(t, pools[0])
	inTx := l.WithTx(tx)
	if _, err := inTx.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
		t.Fatalf("Commit in tx: %v", err)
	}
	if _, err := inTx.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask in tx: %v", err)
	}
	terminate(t, pools[1], pid)
	assertTerminated(t, "COMMIT", tx.Commit(ctx))

	if diff := cmp.Diff(before, summary(t, pools[1])); diff != "" {
		t.Fatalf("a terminated settlement changed the books (-before +after):\n%s", diff)
	}
	assertDoctorOK(t, pools[1])
	// The process is gone with it: recovery releases what the task held.
	clock.pass(task.LeaseExpiresAt)
	recoverOnce(t, m, ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 2, FailedAttempts: 1, FailedTasks: 1, CleanedTaskAdmissions: 1})
	if s := summary(t, pools[1]); s.CountersReserved != 0 || s.CountersUsed != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 {
		t.Fatalf("after recovery = %+v", s)
	}
	assertDoctorOK(t, pools[1])
}

// TestFaultTerminatedWhileBlocked terminates each operation's own
// (implicit) transaction while its statement is blocked mid-flight on a
// counter row that another transaction holds.
func TestFaultTerminatedWhileBlocked(t *testing.T) {
	t.Parallel()
	type op func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, grant ratelimit.Grant) error
	cases := map[string]op{
		"reserve": func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, _ ratelimit.Grant) error {
			_, err := l.Reserve(ctx, task.ID, task.AttemptID, faultLimits(task.Kind))
			return err
		},
		"commit": func(ctx context.Context, l *ratelimit.Limiter, _ ratelimit.Task, grant ratelimit.Grant) error {
			_, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 42})
			return err
		},
		"finish": func(ctx context.Context, l *ratelimit.Limiter, task ratelimit.Task, _ ratelimit.Grant) error {
			_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			return err
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pools := pgtest.NewPools(t, 3)
			l := ratelimit.New(pools[0])
			key := uniqueKey("k")
			task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: key, Worker: "w", LeaseTTL: time.Second})
			if err != nil {
				t.Fatalf("CreateTask: %v", err)
			}
			grant, err := l.Reserve(ctx, task.ID, task.AttemptID, faultLimits(key))
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			before := summary(t, pools[2])

			// Another transaction holds the counter rows of the scope.
			holder, _ := beginWithPid(t, pools[1])
			if _, err := l.WithTx(holder).Reserve(ctx, "", "", faultLimits(key)[:2]); err != nil {
				t.Fatalf("Reserve (holder): %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- run(ctx, l, task, grant) }()
			waiting := pgtest.AwaitLockWaiters(t, pools[2], name)
			if len(waiting) != 1 {
				t.Fatalf("backends waiting: %v, want one", waiting)
			}
			terminate(t, pools[2], waiting[0])
			assertTerminated(t, name, <-done)
			if err := holder.Rollback(ctx); err != nil {
				t.Fatalf("Rollback (holder): %v", err)
			}
			if diff := cmp.Diff(before, summary(t, pools[2])); diff != "" {
				t.Fatalf("a terminated %s changed the books (-before +after):\n%s", name, diff)
			}
			assertDoctorOK(t, pools[1])

			// Retrying on a fresh connection completes the operation.
			if err := run(ctx, l, task, grant); err != nil {
				t.Fatalf("%s retried: %v", name, err)
			}
			assertDoctorOK(t, pools[1])
		})
	}
}
