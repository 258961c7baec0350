package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// ptr returns a pointer to t, for a generated query's optional now.
func ptr(t time.Time) *time.Time { return &t }

// maintenanceLeases lists the maintenance leases held now, as "job/holder".
func maintenanceLeases(t *testing.T, conn dbtest.DBTX) []string {
	t.Helper()
	rows, err := testq.MaintenanceLeaseList(context.Background(), conn)
	if err != nil {
		t.Fatalf("MaintenanceLeaseList: %v", err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Name + "/" + r.Holder
	}
	return out
}

// Single flight without session state: many recoveries from several pools,
// one after the other and at once, leave no advisory lock and no lease
// behind, and none of them is skipped for a lock a finished run forgot.
func TestRecoverLeavesNoSessionState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 3)
	var clock testClock
	l, _ := clocked(pools[0], &clock)
	var expiry time.Time
	for range 6 {
		expiry = latest(expiry, startSync(t, l, time.Second).LeaseExpiresAt)
	}
	clock.pass(expiry)
	var total ratelimit.RecoveryResult
	for round := range 4 {
		results := make([]ratelimit.RecoveryResult, len(pools))
		errs := make([]error, len(pools))
		var wg sync.WaitGroup
		for i, pool := range pools {
			wg.Go(func() {
				_, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1))
				results[i], errs[i] = m.Recover(ctx)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, pool %d: Recover: %v", round, i, err)
			}
			total.FailedTasks += results[i].FailedTasks
			total.FailedAttempts += results[i].FailedAttempts
		}
		if locks, err := testq.AdvisoryLocksHeld(ctx, pools[0]); err != nil || len(locks) != 0 {
			t.Fatalf("round %d: advisory locks held after recovery: %+v, %v", round, locks, err)
		}
		if leases := maintenanceLeases(t, pools[0]); len(leases) != 0 {
			t.Fatalf("round %d: leases held after recovery: %v", round, leases)
		}
		// One after the other, from each pool: never skipped.
		for _, pool := range pools {
			_, m := clocked(pool, &clock)
			recoverOnce(t, m, ratelimit.RecoveryResult{})
		}
	}
	if diff := cmp.Diff(ratelimit.RecoveryResult{FailedTasks: 6, FailedAttempts: 6}, total); diff != "" {
		t.Fatalf("recovered in total (-want +got):\n%s", diff)
	}
}

// A run that cannot renew its lease in time stops with ErrMaintenanceLeaseLost: another process
// took the job over, and the two must not repeat each other's work. What the run did so far
// stands.
func TestRecoverStopsWhenItsLeaseIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	pool := pools[0]
	var clock testClock
	l, _ := clocked(pool, &clock)
	const tasks = 3
	first := startSync(t, l, time.Second)
	stall := uniqueKey("stall")
	if _, err := l.Reserve(ctx, first.ID, first.AttemptID, []ratelimit.Limit{window("key", stall, ratelimit.MetricRequests, 10, 1)}); err != nil {
		t.Fatalf("Reserve(first): %v", err)
	}
	for range tasks - 1 {
		startSync(t, l, 2*time.Second)
	}
	clock.pass(time.Now().Add(3 * time.Second))

	// Another session holds the counter row of the task that expired first (recovery passes a
	// busy task row over, but waits for a counter row: the lock order), so the run, one task per
	// transaction, stops on it in its first batch.
	blocker, err := pools[1].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if n, err := testq.OpsLockScopeCounters(ctx, blocker, dbtest.OpsLockScopeCountersParams{ScopeType: "key", ScopeKey: stall}); err != nil || n != 1 {
		t.Fatalf("lock the first task's counter: %d, %v", n, err)
	}
	_, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLeaseTTL(time.Second))
	done := make(chan struct{})
	var res ratelimit.RecoveryResult
	go func() {
		defer close(done)
		res, err = m.Recover(ctx)
	}()
	pgtest.AwaitLockWaiters(t, pools[1], "the run (at the locked task)")
	// Meanwhile another process takes the job over (on its clock the lease has expired), and
	// more than a third of the lease's time passes: the run renews before its next batch.
	stolen, terr := queries.MaintenanceLeaseTake(ctx, pools[1], db.MaintenanceLeaseTakeParams{
		Name: "recover", Holder: "thief", TtlSeconds: 3600, Now: ptr(clock.now().Add(time.Hour)),
	})
	if terr != nil || !stolen.Acquired {
		t.Fatalf("taking the lease over = %+v, %v", stolen, terr)
	}
	time.Sleep(400 * time.Millisecond)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if !errors.Is(err, ratelimit.ErrMaintenanceLeaseLost) {
		t.Fatalf("Recover = %+v, %v; want ErrMaintenanceLeaseLost", res, err)
	}
	if diff := cmp.Diff(ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1}, res); diff != "" {
		t.Fatalf("what the run did before it stopped (-want +got):\n%s", diff)
	}
	if s := summary(t, pool); s.TasksFailed != 1 || s.TasksRunning != tasks-1 {
		t.Fatalf("state after the lost run = %+v, want the first task failed, the others running", s)
	}
	// The thief still holds the job: the lost run did not release its lease.
	if diff := cmp.Diff([]string{"recover/thief"}, maintenanceLeases(t, pool)); diff != "" {
		t.Fatalf("leases (-want +got):\n%s", diff)
	}
}

func TestRecoverClampsHugeOptions(t *testing.T) {
	t.Parallel()
	if strconv.IntSize < 64 {
		t.Skip("an int cannot exceed math.MaxInt32 here")
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	huge := int64(math.MaxInt32) + 1 // int32(huge) would be negative
	wraps := int64(1) << 32          // int32(wraps) would be 0
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(int(huge)), ratelimit.WithMaxRequeues(int(wraps)))

	createAsync(t, l)
	task := claim(t, l, "w", time.Second)
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", uniqueKey("k"), ratelimit.MetricTokens, 100, 10)}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	clock.pass(task.LeaseExpiresAt)
	// A batch of MaxInt32 rows, and requeues capped at MaxInt32: the task is
	// requeued, not failed as a poison task.
	recoverOnce(t, m, ratelimit.RecoveryResult{ReleasedRateReservations: 1, FailedAttempts: 1, RequeuedAsyncTasks: 1})
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskQueued || got.RequeueCount != 1 {
		t.Fatalf("task after recovery = %+v, want requeued", got)
	}
	assertDoctorOK(t, pool)
}

// reserveBehindRecovery is a worker that dies in the middle of an admission:
// it reserves limits for its task's running attempt in a transaction that
// commits only after recovery has reclaimed the task (requeued it, failed
// the attempt). The admission saw a running attempt; recovery did not see
// the admission. What is left is capacity held for an attempt that is over.
func reserveBehindRecovery(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, pool *pgxpool.Pool, limits []ratelimit.Limit) (ratelimit.Task, ratelimit.Grant) {
	t.Helper()
	ctx := context.Background()
	createAsync(t, l)
	task := claim(t, l, "doomed-worker", time.Second)
	clock.pass(task.LeaseExpiresAt)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	grant, err := l.WithTx(tx).Reserve(ctx, task.ID, task.AttemptID, limits)
	if err != nil {
		t.Fatalf("Reserve (late): %v", err)
	}
	recoverOnce(t, m, ratelimit.RecoveryResult{FailedAttempts: 1, RequeuedAsyncTasks: 1})
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit (late): %v", err)
	}
	if diff := cmp.Diff([]string{"failed/" + ratelimit.ErrorCodeExecutionLeaseExpired}, attemptStates(t, l, task.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
	return task, grant
}

func TestRecoverReleasesLateReservationsOfFinishedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	key := uniqueKey("k")
	limits := []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricRequests, 10, 1),
		window("api_key", key, ratelimit.MetricTokens, 1000, 400),
		concurrent("model", key, 2),
	}
	dead, late := reserveBehindRecovery(t, l, m, &clock, pool, limits)

	// The task lives on: another worker claims it and holds capacity of its
	// own, for its running attempt. The dead attempt's holdings are neither
	// a finished task's nor an expired task's.
	again := claim(t, l, "live-worker", time.Hour)
	if again.ID != dead.ID || again.AttemptCount != 2 {
		t.Fatalf("claimed %+v, want the requeued task as attempt 2", again)
	}
	live, err := l.Reserve(ctx, again.ID, again.AttemptID, limits)
	if err != nil {
		t.Fatalf("Reserve (live): %v", err)
	}

	// The doctor sees what the dead attempt holds.
	report, err := m.Doctor(ctx)
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	var kinds []string
	for _, p := range report.Problems {
		if p.TaskID != dead.ID || p.AttemptID != dead.AttemptID || p.TaskStatus != ratelimit.TaskRunning {
			t.Errorf("problem %s: want task %s (running), attempt %s", p, dead.ID, dead.AttemptID)
		}
		kinds = append(kinds, string(p.Kind)+"/"+p.Metric)
	}
	wantKinds := []string{
		string(ratelimit.ProblemLeaseOfFinishedAttempt) + "/" + ratelimit.MetricConcurrent,
		string(ratelimit.ProblemReservationOfFinishedAttempt) + "/" + ratelimit.MetricRequests,
		string(ratelimit.ProblemReservationOfFinishedAttempt) + "/" + ratelimit.MetricTokens,
	}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Fatalf("doctor problems (-want +got):\n%s\n%s", diff, report)
	}

	recoverOnce(t, m, ratelimit.RecoveryResult{ReleasedRateReservations: 2, ReleasedConcurrencyLeases: 1})
	recoverOnce(t, m, ratelimit.RecoveryResult{})
	assertDoctorOK(t, pool)

	// The dead attempt's holdings are released as attempt_finished; the live
	// attempt's are untouched.
	if diff := cmp.Diff(holdings(late, "released", "released", "attempt_finished"), holdingsOf(t, pool, dead.AttemptID)); diff != "" {
		t.Fatalf("the dead attempt's holdings (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(holdings(live, "reserved", "unreleased", ""), holdingsOf(t, pool, again.AttemptID)); diff != "" {
		t.Fatalf("the live attempt's holdings (-want +got):\n%s", diff)
	}
	s := summary(t, pool)
	want := dbtest.OpsStateSummaryRow{
		TasksRunning: 1, AttemptsRunning: 1, ReservationsOpen: 2, ReservationsReleased: 2,
		LeasesUnreleased: 1, LeasesLive: 1, CountersReserved: 1 + 400,
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("state after recovery (-want +got):\n%s", diff)
	}
}

// holdings is what a grant should look like in OpsHoldingsByAttempt, by id:
// "kind/state/reason", its reservations in state reservation, its leases in
// state lease (released ones with the reason).
func holdings(g ratelimit.Grant, reservation, lease, reason string) map[string]string {
	out := map[string]string{}
	for _, r := range g.Reservations {
		out[r.ID] = "reservation/" + reservation + "/" + reasonIf(reservation == "released", reason)
	}
	for _, l := range g.Leases {
		out[l.ID] = "lease/" + lease + "/" + reasonIf(lease == "released", reason)
	}
	return out
}

func reasonIf(ended bool, reason string) string {
	if ended {
		return reason
	}
	return ""
}

// holdingsOf reads the reservations and leases attached to an attempt, by
// id: "kind/state/reason".
func holdingsOf(t *testing.T, conn db.DBTX, attemptID string) map[string]string {
	t.Helper()
	rows, err := testq.OpsHoldingsByAttempt(context.Background(), conn, mustUUID(t, attemptID))
	if err != nil {
		t.Fatalf("OpsHoldingsByAttempt: %v", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.ID.String()] = r.Kind + "/" + r.State + "/" + r.Reason
	}
	return out
}

// A Recover whose context ends at any moment, even while it takes its lease, leaves no lease
// behind: the next one is never skipped.
func TestRecoverInterruptedLeavesNoLease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	m := ratelimit.NewMaintenance(pool)
	for i := range 60 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%12)*250*time.Microsecond)
		_, err := m.Recover(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: interrupted Recover = %v, want nil or the deadline's error", i, err)
		}
		recoverOnce(t, m, ratelimit.RecoveryResult{})
		if leases := maintenanceLeases(t, pool); len(leases) != 0 {
			t.Fatalf("round %d: leases left: %v", i, leases)
		}
	}
}
