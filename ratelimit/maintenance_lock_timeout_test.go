package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// lockBound is the WithMaintenanceLockTimeout of these tests; a run that
// waits on past lockBound+lockSlack is taken for hung (the machine is
// shared: keep it generous).
const (
	lockBound = 300 * time.Millisecond
	lockSlack = 10 * time.Second
)

// holdCounters locks the counter rows of a scope in a transaction of its
// own, as a gateway's transaction left idle would, until the test ends or
// it calls the release it returns.
func holdCounters(t *testing.T, pool *pgxpool.Pool, scopeType, key string) (release func()) {
	t.Helper()
	return holdCountersBy(t, pool, "OpsLockScopeCounters", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		return testq.OpsLockScopeCounters(ctx, tx, dbtest.OpsLockScopeCountersParams{ScopeType: scopeType, ScopeKey: key})
	})
}

// holdCountersBy runs lock, the named statement that locks a scope's
// counter rows, in a transaction of its own that it holds open until the
// test ends or it calls the release it returns.
func holdCountersBy(t *testing.T, pool *pgxpool.Pool, name string, lock func(context.Context, pgx.Tx) (int64, error)) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx := heldTx(t, pool)
	if n, err := lock(ctx, tx); err != nil || n == 0 {
		t.Fatalf("%s = %d, %v; want its counters locked", name, n, err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// assertLockWait checks that err reports the rows a step of job left
// because their lock stayed held past bound, which it names.
func assertLockWait(t *testing.T, err error, job, step string, rows int, bound time.Duration) {
	t.Helper()
	var lw *ratelimit.LockWaitError
	if !errors.As(err, &lw) {
		t.Fatalf("%s: %v, want a *LockWaitError", job, err)
	}
	if lw.Job != job || lw.Step != step || lw.Rows != rows || lw.Bound != bound {
		t.Errorf("%s: LockWaitError{Job: %q, Step: %q, Rows: %d, Bound: %v}, want {%q, %q, %d, %v}", job, lw.Job, lw.Step, lw.Rows, lw.Bound, job, step, rows, bound)
	}
	if !isLockNotAvailable(err) {
		t.Errorf("%s: %v, want the server's lock_not_available (55P03) in the chain", job, err)
	}
}

// isLockNotAvailable says whether err holds the server's lock_not_available
// (55P03), what a statement that hit its lock_timeout fails with.
func isLockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// claimedAsync makes the i-th task of deadTasksOn: an async task a worker
// claimed, its lease i+1 seconds long so that recovery finds them in order.
func claimedAsync(t *testing.T, l *ratelimit.Limiter) func(i int) ratelimit.Task {
	return func(i int) ratelimit.Task {
		createAsync(t, l)
		return claim(t, l, "w", time.Duration(i+1)*time.Second)
	}
}

// deadTasksOn makes a task a key with start, each holding one reservation
// on its key's api_key counter, and passes the clock beyond all their
// leases: their workers died, and recovery has them to reclaim.
func deadTasksOn(t *testing.T, l *ratelimit.Limiter, clock *testClock, start func(i int) ratelimit.Task, keys ...string) {
	t.Helper()
	var expiry time.Time
	for i, key := range keys {
		task := start(i)
		if _, err := l.Reserve(context.Background(), task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1e6, 7)}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		expiry = latest(expiry, task.LeaseExpiresAt)
	}
	clock.pass(expiry)
}

// assertWaitsOnLock checks that run, made without a lock timeout, waits
// on a held lock for as long as its context lets it.
func assertWaitsOnLock(t *testing.T, what string, run func(context.Context) error) {
	t.Helper()
	wait, cancel := context.WithTimeout(context.Background(), 2*lockBound)
	defer cancel()
	if err := run(wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s without a lock timeout: %v, want it to wait until its context ends", what, err)
	}
}

// runBounded runs run, made with a lock timeout of lockBound, on a held
// lock and checks that it returns after about lockBound: no sooner, and
// not only when its context ends lockSlack past it.
func runBounded(t *testing.T, what string, run func(context.Context)) {
	t.Helper()
	hang, stop := context.WithTimeout(context.Background(), lockBound+lockSlack)
	defer stop()
	start := time.Now()
	run(hang)
	if took := time.Since(start); took < lockBound || took >= lockBound+lockSlack {
		t.Errorf("%s took %v, want about %v", what, took, lockBound)
	}
}

// A transaction that holds a counter row (a gateway's WithTx left idle)
// used to hang Recover for as long as it stayed open: reclaiming a task
// locks its reservations' counters first (the lock order), and waited.
// With WithMaintenanceLockTimeout the batch that waits gives up after the
// bound, whole (nothing of it half done), and the run goes on with the
// other tasks; the error names the step and the rows left, which a later
// run takes once the lock is gone.
func TestRecoverLockTimeoutLeavesTheLockedBatchAndGoesOn(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, bounded := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLockTimeout(lockBound))
	_, unbounded := clocked(pool, &clock)
	locked := uniqueKey("locked")

	// 5 async tasks whose workers die, each holding one reservation; the
	// third on the counter another transaction holds.
	deadTasksOn(t, l, &clock, claimedAsync(t, l), uniqueKey("free"), uniqueKey("free"), locked, uniqueKey("free"), uniqueKey("free"))
	release := holdCounters(t, pool, "api_key", locked)

	// Without a bound, Recover waits for as long as its context lets it.
	assertWaitsOnLock(t, "Recover", func(ctx context.Context) error {
		_, err := unbounded.Recover(ctx)
		return err
	})

	var got ratelimit.RecoveryResult
	var err error
	runBounded(t, "Recover", func(ctx context.Context) { got, err = bounded.Recover(ctx) })
	assertLockWait(t, err, "recover", "reclaim expired tasks", 1, lockBound)
	want := ratelimit.RecoveryResult{RequeuedAsyncTasks: 4, FailedAttempts: 4, ReleasedRateReservations: 4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Recover result (-want +got):\n%s", diff)
	}
	if s := summary(t, pool); s.TasksRunning != 1 || s.ReservationsOpen != 1 || s.AttemptsRunning != 1 {
		t.Fatalf("state with the counter held = %+v, want the one task on it left whole", s)
	}

	release()
	recoverOnce(t, bounded, ratelimit.RecoveryResult{RequeuedAsyncTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1})
	assertDoctorOK(t, pool)
}

// Prune releases stale reservations through their counters: one held by
// another transaction used to hang it. With WithMaintenanceLockTimeout it
// leaves that reservation (and so its window) after the bound and prunes
// everything else.
func TestPruneLockTimeoutLeavesTheLockedBatchAndGoesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, bounded := clocked(pool, &clock, ratelimit.WithPruneBatchSize(1), ratelimit.WithMaintenanceLockTimeout(lockBound))
	_, unbounded := clocked(pool, &clock)
	// 5 reservations never settled, each on its own counter, one of them
	// held by another transaction.
	locked := uniqueKey("locked")
	for i := range 5 {
		key := uniqueKey("stale")
		if i == 2 {
			key = locked
		}
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(key, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Minute)
	release := holdCounters(t, pool, "api_key", locked)

	assertWaitsOnLock(t, "Prune", func(ctx context.Context) error {
		_, err := unbounded.Prune(ctx, time.Second)
		return err
	})

	var res ratelimit.PruneResult
	var err error
	runBounded(t, "Prune", func(ctx context.Context) { res, err = bounded.Prune(ctx, time.Second) })
	assertLockWait(t, err, "prune", "release stale reservations", 1, lockBound)
	if res.ReleasedStaleReservations != 4 || res.Counters != 4 || res.Reservations != 4 {
		t.Errorf("released %d stale reservations, pruned %d counter windows and %d reservations, want 4 of each: %+v",
			res.ReleasedStaleReservations, res.Counters, res.Reservations, res)
	}
	if rows := counterRows(t, pool, "api_key", locked); len(rows) != 1 || rows[0].ReservedValue != 1 {
		t.Errorf("the held counter: %+v, want it kept with its reservation", rows)
	}

	release()
	res, err = bounded.Prune(ctx, time.Second)
	if err != nil || res.ReleasedStaleReservations != 1 || res.Counters != 1 || res.Reservations != 1 {
		t.Errorf("Prune once the lock is gone = %+v, %v; want the one left released and pruned", res, err)
	}
	assertDoctorOK(t, pool)
}

// Zero and negative bounds mean none, as for WithDoctorLockTimeout; a
// bound past lock_timeout's range is that range's end, not an error.
func TestMaintenanceLockTimeoutEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, d := range []time.Duration{-time.Second, 0, time.Nanosecond, 1000 * time.Hour} {
		m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(d))
		if res, err := m.Recover(ctx); err != nil || !res.Zero() {
			t.Errorf("WithMaintenanceLockTimeout(%v): Recover = %+v, %v; want nothing done, no error", d, res, err)
		}
		if _, err := m.Prune(ctx, time.Hour); err != nil {
			t.Errorf("WithMaintenanceLockTimeout(%v): Prune: %v", d, err)
		}
	}
}

// After maxLockWaits batches that timed out, a step leaves the rest of its
// rows to a later run, unread: the error says so, beside the rows it
// tried, rather than count only those.
func TestLockWaitErrorSaysTheStepLeftTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, bounded := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLockTimeout(lockBound))
	locked := uniqueKey("locked")

	// 4 async tasks whose workers die, the first two (by lease expiry, the
	// order recovery finds them in) on the counter another transaction holds.
	deadTasksOn(t, l, &clock, claimedAsync(t, l), locked, locked, uniqueKey("free"), uniqueKey("free"))
	release := holdCounters(t, pool, "api_key", locked)

	hang, stop := context.WithTimeout(ctx, 2*lockBound+lockSlack)
	defer stop()
	got, err := bounded.Recover(hang)
	assertLockWait(t, err, "recover", "reclaim expired tasks", 2, lockBound)
	var lw *ratelimit.LockWaitError
	if errors.As(err, &lw) && !lw.Rest {
		t.Errorf("LockWaitError%+v: Rest false, want true: the step left its rows not reached yet too", *lw)
	}
	if !got.Zero() {
		t.Errorf("Recover = %+v, want nothing done: the step stopped after two waits", got)
	}
	if want := "left 2 rows and the rest of the step"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Recover: %v, want it to say %q", err, want)
	}
	if s := summary(t, pool); s.TasksRunning != 4 {
		t.Fatalf("state = %+v, want the 4 tasks left running", s)
	}

	release()
	recoverOnce(t, bounded, ratelimit.RecoveryResult{RequeuedAsyncTasks: 4, FailedAttempts: 4, ReleasedRateReservations: 4})
}
