package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// recoverOnce runs Recover and compares its result with want.
func recoverOnce(t *testing.T, m *ratelimit.Maintenance, want ratelimit.RecoveryResult) {
	t.Helper()
	got, err := m.Recover(context.Background())
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Recover result (-want +got):\n%s", diff)
	}
}

func latest(times ...time.Time) time.Time {
	var m time.Time
	for _, t := range times {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func TestRecoverReclaimsExpiredTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	key := uniqueKey("k")
	q := queueLimit("q", 10)
	limits := func(leaseTTL time.Duration) []ratelimit.Limit {
		c := concurrent("model", key, 10)
		c.LeaseTTL = leaseTTL
		return []ratelimit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 100, 1),
			window("api_key", key, ratelimit.MetricTokens, 10000, 500),
			c,
		}
	}

	// A: async, claimed with a 1 s lease, holding two reservations and a
	// 60 s concurrency lease: its worker dies.
	createAsync(t, l, q)
	a := claim(t, l, "dead-worker", time.Second)
	if _, err := l.Reserve(ctx, a.ID, a.AttemptID, limits(time.Minute)); err != nil {
		t.Fatalf("Reserve(A): %v", err)
	}
	// S: sync, 1 s lease, same holdings: its caller dies.
	s := startSync(t, l, time.Second, q)
	if _, err := l.Reserve(ctx, s.ID, s.AttemptID, limits(time.Minute)); err != nil {
		t.Fatalf("Reserve(S): %v", err)
	}
	// B: async, claimed with a long lease: alive, untouched by recovery.
	createAsync(t, l, q)
	b := claim(t, l, "live-worker", time.Hour)
	if _, err := l.Reserve(ctx, b.ID, b.AttemptID, limits(time.Minute)); err != nil {
		t.Fatalf("Reserve(B): %v", err)
	}
	// C: queued, never claimed: untouched.
	c := createAsync(t, l, q)
	// A task-less admission whose lease lapses: recovery closes the lease;
	// its reservations are the caller's to settle.
	loose, err := l.Reserve(ctx, "", "", limits(time.Second))
	if err != nil {
		t.Fatalf("Reserve(task-less): %v", err)
	}

	clock.pass(latest(a.LeaseExpiresAt, s.LeaseExpiresAt, loose.Leases[0].ExpiresAt))
	recoverOnce(t, m, ratelimit.RecoveryResult{
		ReleasedConcurrencyLeases: 3, // A's and S's (execution lease expired) + the task-less expired one
		ReleasedRateReservations:  4, // A's two and S's two
		FailedAttempts:            2,
		FailedTasks:               1, // S
		RequeuedAsyncTasks:        1, // A
		CleanedTaskAdmissions:     1, // S's; A keeps its queue place
	})
	recoverOnce(t, m, ratelimit.RecoveryResult{}) // idempotent

	gotA := getTask(t, l, a.ID)
	if gotA.Status != ratelimit.TaskQueued || gotA.RequeueCount != 1 || gotA.ExecutionToken != "" || gotA.Worker != "" || !gotA.FinishedAt.IsZero() {
		t.Fatalf("A after recovery = %+v, want requeued", gotA)
	}
	if diff := cmp.Diff([]string{"task.queued", "task.running", "task.queued"}, eventTypes(t, l, a.ID)); diff != "" {
		t.Fatalf("A's events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"failed/execution_lease_expired"}, attemptStates(t, l, a.ID)); diff != "" {
		t.Fatalf("A's attempts (-want +got):\n%s", diff)
	}
	gotS := getTask(t, l, s.ID)
	if gotS.Status != ratelimit.TaskFailed || gotS.ErrorCode != ratelimit.ErrorCodeServerRestarted || gotS.FinishedAt.IsZero() {
		t.Fatalf("S after recovery = %+v, want failed server_restarted", gotS)
	}
	if diff := cmp.Diff([]string{"task.running", "task.failed"}, eventTypes(t, l, s.ID)); diff != "" {
		t.Fatalf("S's events (-want +got):\n%s", diff)
	}
	if got := getTask(t, l, b.ID); got.Status != ratelimit.TaskRunning || got.ExecutionToken != b.ExecutionToken || got.LastEventSeq != 2 {
		t.Fatalf("B (alive) was touched: %+v", got)
	}
	if got := getTask(t, l, c.ID); got.Status != ratelimit.TaskQueued || got.LastEventSeq != 1 {
		t.Fatalf("C (queued) was touched: %+v", got)
	}

	// The dead worker's token is void everywhere.
	_, err = l.HeartbeatTask(ctx, a.ID, a.ExecutionToken, 0)
	asStale(t, err)
	_, err = l.FinishTask(ctx, s.ID, s.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	asStale(t, err)

	// Only B's and the task-less reservations still hold capacity.
	sum := summary(t, pool)
	want := dbtest.OpsStateSummaryRow{
		TasksQueued: 2, TasksRunning: 1, TasksFailed: 1, AttemptsRunning: 1, Admissions: 3,
		ReservationsOpen: 4, ReservationsReleased: 4, LeasesUnreleased: 1, LeasesLive: 1,
		CountersReserved: 2 * (1 + 500),
	}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Fatalf("state after recovery (-want +got):\n%s", diff)
	}
	assertDoctorOK(t, pool)

	// A runs again, as attempt 2, with a new token.
	again := claim(t, l, "new-worker", time.Minute)
	if again.ID != a.ID && again.ID != c.ID {
		t.Fatalf("claimed %s, want A or C", again.ID)
	}
}

func TestRecoverFailsPoisonTaskAfterCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithMaxRequeues(2))
	key := uniqueKey("k")
	task := createAsync(t, l, queueLimit("q", 1))

	// The task kills its worker every time: claim, take a slot, die.
	for cycle := 1; cycle <= 3; cycle++ {
		claimed := claim(t, l, "w", time.Second)
		if claimed.ID != task.ID || claimed.AttemptCount != cycle {
			t.Fatalf("cycle %d claimed %+v", cycle, claimed)
		}
		if _, err := l.Reserve(ctx, claimed.ID, claimed.AttemptID, []ratelimit.Limit{concurrent("model", key, 1)}); err != nil {
			t.Fatalf("cycle %d Reserve: %v", cycle, err)
		}
		clock.pass(claimed.LeaseExpiresAt)
		want := ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, FailedAttempts: 1, RequeuedAsyncTasks: 1}
		if cycle == 3 {
			want = ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, FailedAttempts: 1, FailedPoisonTasks: 1, CleanedTaskAdmissions: 1}
		}
		recoverOnce(t, m, want)
	}
	if _, err := l.ClaimTask(ctx, "w", 0); !errors.Is(err, ratelimit.ErrNoTask) {
		t.Fatalf("ClaimTask after the cap: %v, want ErrNoTask (the poison task is not requeued)", err)
	}
	got := getTask(t, l, task.ID)
	if got.Status != ratelimit.TaskFailed || got.ErrorCode != ratelimit.ErrorCodeRequeueLimitExceeded ||
		got.RequeueCount != 2 || got.AttemptCount != 3 || got.FinishedAt.IsZero() {
		t.Fatalf("poison task = %+v, want failed requeue_limit_exceeded after 2 requeues and 3 attempts", got)
	}
	if got.ErrorMessage != "execution lease expired 3 times; requeued 2 times, the limit" {
		t.Fatalf("poison task message = %q", got.ErrorMessage)
	}
	wantEvents := []string{"task.queued", "task.running", "task.queued", "task.running", "task.queued", "task.running", "task.failed"}
	if diff := cmp.Diff(wantEvents, eventTypes(t, l, task.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	lease := "failed/" + ratelimit.ErrorCodeExecutionLeaseExpired
	if diff := cmp.Diff([]string{lease, lease, lease}, attemptStates(t, l, task.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
	// Its queue place is free again, and the books balance.
	createAsync(t, l, queueLimit("q", 1))
	recoverOnce(t, m, ratelimit.RecoveryResult{})
	assertDoctorOK(t, pool)

	// With a cap of zero, the first expiry is final.
	_, strict := clocked(pool, &clock, ratelimit.WithMaxRequeues(0))
	doomed := claim(t, l, "w", time.Second)
	clock.pass(doomed.LeaseExpiresAt)
	recoverOnce(t, strict, ratelimit.RecoveryResult{FailedAttempts: 1, FailedPoisonTasks: 1, CleanedTaskAdmissions: 1})
}

func TestRecoverSkipsWhileAnotherProcessHoldsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	task := startSync(t, l, time.Second)
	clock.pass(task.LeaseExpiresAt)

	// Another process is recovering: it holds the recover lease for 60 s.
	held, err := queries.MaintenanceLeaseTake(ctx, pool, db.MaintenanceLeaseTakeParams{
		Name: "recover", Holder: "other-process", TtlSeconds: 60, Now: ptr(clock.now()),
	})
	if err != nil || !held.Acquired {
		t.Fatalf("MaintenanceLeaseTake = %+v, %v", held, err)
	}
	recoverOnce(t, m, ratelimit.RecoveryResult{Skipped: true})
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning {
		t.Fatalf("a skipped recovery changed the task: %+v", got)
	}
	// The other process dies without giving the lease up: once it expires,
	// recovery takes the job over, and gives the lease up when done.
	clock.pass(held.ExpiresAt)
	recoverOnce(t, m, ratelimit.RecoveryResult{FailedAttempts: 1, FailedTasks: 1})
	if leases := maintenanceLeases(t, pool); len(leases) != 0 {
		t.Fatalf("leases after recovery: %v, want none", leases)
	}
	// A holder that gave its lease up cannot renew it.
	if _, err := queries.MaintenanceLeaseRenew(ctx, pool, db.MaintenanceLeaseRenewParams{Name: "recover", Holder: "other-process", TtlSeconds: 60}); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("renewing a lease taken over = %v, want no row", err)
	}
}

func TestRecoverRaceBetweenTwoPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	key := uniqueKey("k")
	var clock testClock
	setupL, _ := clocked(pools[0], &clock)
	const tasks = 60
	var expiry time.Time
	for range tasks {
		task := startSync(t, setupL, time.Second, queueLimit("q", tasks))
		if _, err := setupL.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1e6, 10)}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		expiry = latest(expiry, task.LeaseExpiresAt)
	}
	clock.pass(expiry)

	var results [2]ratelimit.RecoveryResult
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			_, m := clocked(pools[i], &clock, ratelimit.WithRecoveryBatchSize(5))
			<-start
			results[i], errs[i] = m.Recover(ctx)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Recover on pool %d: %v", i, err)
		}
	}
	worker, idle := results[0], results[1]
	if worker.Zero() {
		worker, idle = idle, worker
	}
	if !idle.Zero() {
		t.Fatalf("both recoveries did work: %+v and %+v", results[0], results[1])
	}
	want := ratelimit.RecoveryResult{ReleasedRateReservations: tasks, FailedAttempts: tasks, FailedTasks: tasks, CleanedTaskAdmissions: tasks}
	if diff := cmp.Diff(want, worker); diff != "" {
		t.Fatalf("the working recovery (-want +got):\n%s", diff)
	}
	t.Logf("racing recoveries: one did %s; the other returned zeros (skipped: %v)", worker, idle.Skipped)
	assertDoctorOK(t, pools[0])
	if s := summary(t, pools[1]); s.TasksFailed != tasks || s.ReservationsOpen != 0 || s.CountersReserved != 0 || s.Admissions != 0 {
		t.Fatalf("state after the race = %+v", s)
	}
}

func TestRecoverInBoundedBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(3))
	key := uniqueKey("k")

	// 10 async tasks whose workers die, each holding one reservation.
	var expiry time.Time
	for range 10 {
		createAsync(t, l)
		task := claim(t, l, "w", time.Second)
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1e6, 7)}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		expiry = latest(expiry, task.LeaseExpiresAt)
	}
	// 7 tasks marked finished by a writer that cleaned up nothing: each still
	// holds a reservation, a live lease, a running attempt and a queue place.
	for range 7 {
		task := startSync(t, l, time.Hour, queueLimit("q", 100))
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 100, 1), concurrent("model", key, 100),
		}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, task.ID), Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
			t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
		}
	}
	clock.pass(expiry)
	recoverOnce(t, m, ratelimit.RecoveryResult{
		ReleasedConcurrencyLeases: 7,
		ReleasedRateReservations:  10 + 7,
		FailedAttempts:            10 + 7,
		RequeuedAsyncTasks:        10,
		CleanedTaskAdmissions:     7,
	})
	recoverOnce(t, m, ratelimit.RecoveryResult{})
	assertDoctorOK(t, pool)
	if s := summary(t, pool); s.ReservationsOpen != 0 || s.CountersReserved != 0 || s.LeasesUnreleased != 0 || s.AttemptsRunning != 0 || s.Admissions != 0 {
		t.Fatalf("state after recovery = %+v", s)
	}
}

// A counter damaged by hand (less reserved than its open reservations,
// which the doctor reports) makes the server reject the release of its
// reservations. Recover leaves the task and the reservations on it alone,
// and still reclaims and releases everything else in the same batches
// (they used to fail whole, every run, until the counter was repaired); it
// reports the server's reason, and once the counter is repaired it takes
// back what it left.
func TestRecoverGoesOnPastADamagedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	damaged := uniqueKey("damaged")
	reserve := func(task ratelimit.Task, key string) {
		t.Helper()
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1e6, 7)}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}

	// 6 async tasks whose workers die, the fourth on the damaged counter.
	var expiry time.Time
	for i := range 6 {
		createAsync(t, l)
		task := claim(t, l, "w", time.Second)
		key := uniqueKey("healthy")
		if i == 3 {
			key = damaged
		}
		reserve(task, key)
		expiry = latest(expiry, task.LeaseExpiresAt)
	}
	// 3 tasks marked finished by a writer that cleaned up nothing, the
	// second on the damaged counter.
	for i := range 3 {
		task := startSync(t, l, time.Hour)
		key := uniqueKey("healthy")
		if i == 1 {
			key = damaged
		}
		reserve(task, key)
		if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, task.ID), Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
			t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
		}
	}
	damage := func(delta float64) {
		t.Helper()
		if _, err := testq.OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
			ReservedDelta: delta, ScopeType: "api_key", ScopeKey: damaged, Metric: ratelimit.MetricTokens,
		}); err != nil {
			t.Fatal(err)
		}
	}
	damage(-10) // 14 reserved on it becomes 4: releasing either 7 would leave it negative
	clock.pass(expiry)

	recoverLeaving := func(want ratelimit.RecoveryResult) {
		t.Helper()
		got, err := m.Recover(ctx)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Recover result (-want +got):\n%s", diff)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Fatalf("Recover: %v, want the server's check_violation", err)
		}
		for _, step := range []string{"reclaim expired tasks", "release reservations of finished tasks", "release reservations of finished attempts"} {
			if !strings.Contains(err.Error(), step) {
				t.Errorf("Recover: %v, want an error of the step %q", err, step)
			}
		}
	}
	recoverLeaving(ratelimit.RecoveryResult{
		RequeuedAsyncTasks:       5,
		FailedAttempts:           5 + 3, // the finished tasks' attempts do not touch counters
		ReleasedRateReservations: 5 + 2,
	})
	recoverLeaving(ratelimit.RecoveryResult{}) // what it left, it leaves again
	if s := summary(t, pool); s.TasksRunning != 1 || s.ReservationsOpen != 2 {
		t.Fatalf("state with the counter damaged = %+v, want the one task and two reservations on it left", s)
	}

	damage(+10)
	recoverOnce(t, m, ratelimit.RecoveryResult{RequeuedAsyncTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 2})
	assertDoctorOK(t, pool)
	if s := summary(t, pool); s.ReservationsOpen != 0 || s.CountersReserved != 0 || s.AttemptsRunning != 0 {
		t.Fatalf("state after recovery = %+v", s)
	}
}
