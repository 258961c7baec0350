package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// instrumentedPool is what a service might wrap its pools in (tracing,
// metrics, spreading load): every statement goes to some pooled connection,
// here of two pools in turn, so it cannot give Recover one session. It has
// no Acquire method.
type instrumentedPool struct {
	pools      []*pgxpool.Pool
	statements int
}

func (p *instrumentedPool) next() *pgxpool.Pool {
	p.statements++
	return p.pools[p.statements%len(p.pools)]
}

func (p *instrumentedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.next().Exec(ctx, sql, args...)
}

func (p *instrumentedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.next().Query(ctx, sql, args...)
}

func (p *instrumentedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.next().QueryRow(ctx, sql, args...)
}

func (p *instrumentedPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return p.next().SendBatch(ctx, b)
}

func (p *instrumentedPool) Begin(ctx context.Context) (pgx.Tx, error) {
	return p.next().Begin(ctx)
}

// acquiringPool is the same wrapper with an Acquire method: it can hand
// Recover one pooled connection for the whole run.
type acquiringPool struct {
	instrumentedPool
	acquired int
}

func (p *acquiringPool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	p.acquired++
	return p.pools[p.acquired%len(p.pools)].Acquire(ctx)
}

func TestRecoverHoldsAndReleasesItsLockOnOneSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	pool := pools[0]
	plain := ratelimit.New(pool)

	// A wrapper without Acquire cannot pin a session: Recover refuses it
	// before taking any lock, and writes nothing.
	expired := startSync(t, plain, time.Second)
	waitPast(t, pool, expired.LeaseExpiresAt)
	wrapper := &instrumentedPool{pools: pools}
	_, err := ratelimit.New(wrapper).Recover(ctx)
	var sessionErr *ratelimit.SessionError
	if !errors.As(err, &sessionErr) || !errors.Is(err, ratelimit.ErrNoSession) {
		t.Fatalf("Recover on %T = %v, want a *SessionError", wrapper, err)
	}
	if sessionErr.Executor != "*ratelimit_test.instrumentedPool" {
		t.Fatalf("SessionError.Executor = %q", sessionErr.Executor)
	}
	if wrapper.statements != 0 {
		t.Fatalf("Recover ran %d statements on a wrapper it refused", wrapper.statements)
	}
	if got := getTask(t, plain, expired.ID); got.Status != ratelimit.TaskRunning {
		t.Fatalf("a refused Recover changed the task: %+v", got)
	}

	// A wrapper with Acquire works, on the connection it acquired; the lock
	// is given back (a recovery from elsewhere is not skipped), many times
	// over (a lock taken on one pooled connection and "released" on another
	// would leak, and every later run would be skipped).
	acquiring := &acquiringPool{instrumentedPool: instrumentedPool{pools: pools}}
	wrapped := ratelimit.New(acquiring)
	recoverOnce(t, wrapped, ratelimit.RecoveryResult{FailedAttempts: 1, FailedTasks: 1})
	for range 5 {
		recoverOnce(t, wrapped, ratelimit.RecoveryResult{})
		recoverOnce(t, plain, ratelimit.RecoveryResult{})
	}
	if acquiring.acquired != 6 || acquiring.statements != 0 {
		t.Fatalf("wrapper: %d acquires and %d statements on the pool, want 6 and 0", acquiring.acquired, acquiring.statements)
	}

	// A pooled connection and a plain connection are sessions themselves;
	// Recover leaves them open and unlocked for their owner.
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer pooled.Release()
	for name, conn := range map[string]ratelimit.Executor{"*pgxpool.Conn": pooled, "*pgx.Conn": pooled.Conn()} {
		task := startSync(t, plain, time.Second)
		waitPast(t, pool, task.LeaseExpiresAt)
		recoverOnce(t, ratelimit.New(conn), ratelimit.RecoveryResult{FailedAttempts: 1, FailedTasks: 1})
		recoverOnce(t, plain, ratelimit.RecoveryResult{})
		if _, err := testq.OpsNow(ctx, conn); err != nil {
			t.Fatalf("%s after Recover: %v", name, err)
		}
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
	l := ratelimit.New(pool, ratelimit.WithRecoveryBatchSize(int(huge)), ratelimit.WithMaxRequeues(int(wraps)))

	createAsync(t, l)
	task := claim(t, l, "w", time.Second)
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", uniqueKey("k"), ratelimit.MetricTokens, 100, 10)}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	waitPast(t, pool, task.LeaseExpiresAt)
	// A batch of MaxInt32 rows, and requeues capped at MaxInt32: the task is
	// requeued, not failed as a poison task.
	recoverOnce(t, l, ratelimit.RecoveryResult{ReleasedRateReservations: 1, FailedAttempts: 1, RequeuedAsyncTasks: 1})
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskQueued || got.RequeueCount != 1 {
		t.Fatalf("task after recovery = %+v, want requeued", got)
	}
	assertDoctorOK(t, l)
}

// reserveBehindRecovery is a worker that dies in the middle of an admission:
// it reserves limits for its task's running attempt in a transaction that
// commits only after recovery has reclaimed the task (requeued it, failed
// the attempt). The admission saw a running attempt; recovery did not see
// the admission. What is left is capacity held for an attempt that is over.
func reserveBehindRecovery(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool, limits []ratelimit.Limit) (ratelimit.Task, ratelimit.Grant) {
	t.Helper()
	ctx := context.Background()
	createAsync(t, l)
	task := claim(t, l, "doomed-worker", time.Second)
	waitPast(t, pool, task.LeaseExpiresAt)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	grant, err := l.WithTx(tx).Reserve(ctx, task.ID, task.AttemptID, limits)
	if err != nil {
		t.Fatalf("Reserve (late): %v", err)
	}
	recoverOnce(t, l, ratelimit.RecoveryResult{FailedAttempts: 1, RequeuedAsyncTasks: 1})
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
	l, pool := setup(t)
	key := uniqueKey("k")
	limits := []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricRequests, 10, 1),
		window("api_key", key, ratelimit.MetricTokens, 1000, 400),
		concurrent("model", key, 2),
	}
	dead, late := reserveBehindRecovery(t, l, pool, limits)

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
	report, err := l.Doctor(ctx)
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

	recoverOnce(t, l, ratelimit.RecoveryResult{ReleasedRateReservations: 2, ReleasedConcurrencyLeases: 1})
	recoverOnce(t, l, ratelimit.RecoveryResult{})
	assertDoctorOK(t, l)

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
