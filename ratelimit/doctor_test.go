package ratelimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestDoctorNamesEachKindOfDamage breaks the books in one way per subtest,
// through the fault-injection statements of queries/ops.sql, and checks that
// the doctor reports exactly that damage, and what Recover can repair.
func TestDoctorNamesEachKindOfDamage(t *testing.T) {
	t.Parallel()
	type damage struct {
		// corrupt breaks a fresh database and returns the one problem the
		// doctor must report.
		corrupt func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, pool *pgxpool.Pool) ratelimit.Problem
		// repaired is what Recover gives back afterwards; zero when recovery
		// cannot repair this kind (the problem must then remain).
		repaired ratelimit.RecoveryResult
	}
	ctx := context.Background()
	reserve := func(t *testing.T, l *ratelimit.Limiter, taskID string, limit ratelimit.Limit) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, taskID, "", []ratelimit.Limit{limit})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return g
	}
	finishBehindTheBack := func(t *testing.T, conn db.DBTX, taskID string) {
		t.Helper()
		n, err := testq.OpsTaskCorruptStatus(ctx, conn, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, taskID), Status: ratelimit.TaskFailed})
		if err != nil || n != 1 {
			t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
		}
	}
	counterProblem := func(kind ratelimit.ProblemKind, r ratelimit.Reservation, expected, actual float64) ratelimit.Problem {
		return ratelimit.Problem{
			Kind: kind, ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Metric: r.Metric,
			Window: r.Window, WindowStart: r.WindowStart, Expected: expected, Actual: actual,
		}
	}

	cases := map[ratelimit.ProblemKind]damage{
		ratelimit.ProblemCounterReserved: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			g := reserve(t, l, "", window("api_key", "k", ratelimit.MetricTokens, 1000, 500))
			corruptCounter(t, conn, g.Reservations[0], 5, 0)
			return counterProblem(ratelimit.ProblemCounterReserved, g.Reservations[0], 500, 505)
		}},
		ratelimit.ProblemCounterUsed: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			g := reserve(t, l, "", window("api_key", "k", ratelimit.MetricTokens, 1000, 500))
			if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 300}); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			corruptCounter(t, conn, g.Reservations[0], 0, -100)
			return counterProblem(ratelimit.ProblemCounterUsed, g.Reservations[0], 300, 200)
		}},
		ratelimit.ProblemReservationWithoutCounter: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			g := reserve(t, l, "", window("api_key", "k", ratelimit.MetricTokens, 1000, 500))
			r := g.Reservations[0]
			n, err := testq.OpsCounterCorruptDelete(ctx, conn, dbtest.OpsCounterCorruptDeleteParams{ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Metric: r.Metric})
			if err != nil || n != 1 {
				t.Fatalf("OpsCounterCorruptDelete = %d, %v", n, err)
			}
			p := counterProblem(ratelimit.ProblemReservationWithoutCounter, r, 0, 500)
			p.RowID = r.ID
			return p
		}},
		ratelimit.ProblemAllotmentOutlivedWindow: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, pool *pgxpool.Pool) ratelimit.Problem {
			// A holder that stops reporting: its block of an hour's window
			// (or a few minutes more) stays open, and the doctor's clock
			// passes the window's end and the grace.
			key := uniqueKey("lost")
			hour := hourWindow(t, pool)
			b, lost := lostBlock(t, pool, hour, key)
			clock.pass(lost)
			return ratelimit.Problem{
				Kind: ratelimit.ProblemAllotmentOutlivedWindow, ScopeType: "model", ScopeKey: key, Metric: ratelimit.MetricTokens,
				Window: hour, WindowStart: b.WindowStart, RowID: b.ID.String(), Expected: 0, Actual: b.Granted,
			}
		}, repaired: ratelimit.RecoveryResult{ReturnedAllotments: 1}},
		ratelimit.ProblemReservationLifeCycle: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			g := reserve(t, l, "", window("api_key", "k", ratelimit.MetricTokens, 1000, 500))
			r := g.Reservations[0]
			n, err := testq.OpsReservationCorruptFinalized(ctx, conn, mustUUID(t, r.ID))
			if err != nil || n != 1 {
				t.Fatalf("OpsReservationCorruptFinalized = %d, %v", n, err)
			}
			p := counterProblem(ratelimit.ProblemReservationLifeCycle, r, 0, 0)
			p.RowID = r.ID
			return p
		}},
		ratelimit.ProblemReservationOfFinishedTask: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			task := createAsync(t, l)
			g := reserve(t, l, task.ID, window("api_key", "k", ratelimit.MetricTokens, 1000, 500))
			finishBehindTheBack(t, conn, task.ID)
			p := counterProblem(ratelimit.ProblemReservationOfFinishedTask, g.Reservations[0], 0, 500)
			p.TaskID, p.TaskStatus, p.RowID = task.ID, ratelimit.TaskFailed, g.Reservations[0].ID
			return p
		}, repaired: ratelimit.RecoveryResult{ReleasedRateReservations: 1}},
		ratelimit.ProblemLeaseOfFinishedTask: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			task := createAsync(t, l)
			g := reserve(t, l, task.ID, concurrent("model", "m", 3))
			finishBehindTheBack(t, conn, task.ID)
			return ratelimit.Problem{
				Kind: ratelimit.ProblemLeaseOfFinishedTask, ScopeType: "model", ScopeKey: "m", Metric: ratelimit.MetricConcurrent,
				TaskID: task.ID, TaskStatus: ratelimit.TaskFailed, RowID: g.Leases[0].ID, Expected: 0, Actual: 1,
			}
		}, repaired: ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1}},
		ratelimit.ProblemAdmissionOfFinishedTask: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			task := createAsync(t, l, queueLimit("q", 5))
			finishBehindTheBack(t, conn, task.ID)
			return ratelimit.Problem{
				Kind: ratelimit.ProblemAdmissionOfFinishedTask, ScopeType: "queue", ScopeKey: "q", Metric: ratelimit.MetricQueueSize,
				TaskID: task.ID, TaskStatus: ratelimit.TaskFailed, Expected: 0, Actual: 1,
			}
		}, repaired: ratelimit.RecoveryResult{CleanedTaskAdmissions: 1}},
		ratelimit.ProblemAttemptOfFinishedTask: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, conn *pgxpool.Pool) ratelimit.Problem {
			createAsync(t, l)
			task := claim(t, l, "w", time.Hour)
			finishBehindTheBack(t, conn, task.ID)
			return ratelimit.Problem{
				Kind: ratelimit.ProblemAttemptOfFinishedTask, TaskID: task.ID, TaskStatus: ratelimit.TaskFailed,
				RowID: task.AttemptID, Expected: 0, Actual: 1,
			}
		}, repaired: ratelimit.RecoveryResult{FailedAttempts: 1}},
		ratelimit.ProblemReservationOfFinishedAttempt: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, pool *pgxpool.Pool) ratelimit.Problem {
			task, g := reserveBehindRecovery(t, l, m, clock, pool, []ratelimit.Limit{window("api_key", "k", ratelimit.MetricTokens, 1000, 500)})
			p := counterProblem(ratelimit.ProblemReservationOfFinishedAttempt, g.Reservations[0], 0, 500)
			p.TaskID, p.TaskStatus, p.RowID, p.AttemptID = task.ID, ratelimit.TaskQueued, g.Reservations[0].ID, task.AttemptID
			return p
		}, repaired: ratelimit.RecoveryResult{ReleasedRateReservations: 1}},
		ratelimit.ProblemLeaseOfFinishedAttempt: {corrupt: func(t *testing.T, l *ratelimit.Limiter, m *ratelimit.Maintenance, clock *testClock, pool *pgxpool.Pool) ratelimit.Problem {
			task, g := reserveBehindRecovery(t, l, m, clock, pool, []ratelimit.Limit{concurrent("model", "m", 3)})
			return ratelimit.Problem{
				Kind: ratelimit.ProblemLeaseOfFinishedAttempt, ScopeType: "model", ScopeKey: "m", Metric: ratelimit.MetricConcurrent,
				TaskID: task.ID, TaskStatus: ratelimit.TaskQueued, RowID: g.Leases[0].ID, AttemptID: task.AttemptID, Expected: 0, Actual: 1,
			}
		}, repaired: ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1}},
	}
	for kind, tc := range cases {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			var clock testClock
			l, m := clocked(pool, &clock)
			assertDoctorOK(t, pool)
			want := tc.corrupt(t, l, m, &clock, pool)
			// Every amount here is a whole number: its exact text is its
			// float64's, in full.
			want.ExpectedText = strconv.FormatFloat(want.Expected, 'f', -1, 64)
			want.ActualText = strconv.FormatFloat(want.Actual, 'f', -1, 64)

			report, err := m.Doctor(ctx)
			if err != nil {
				t.Fatalf("Doctor: %v", err)
			}
			if report.OK() || report.Truncated || report.CheckedAt.IsZero() {
				t.Fatalf("report = %+v", report)
			}
			if diff := cmp.Diff([]ratelimit.Problem{want}, report.Problems); diff != "" {
				t.Fatalf("problems (-want +got):\n%s", diff)
			}
			if !strings.Contains(report.String(), string(kind)) {
				t.Fatalf("report text does not name %s:\n%s", kind, report)
			}
			if kind.Recoverable() == tc.repaired.Zero() {
				t.Fatalf("%s.Recoverable() = %v, but Recover repairs %+v", kind, kind.Recoverable(), tc.repaired)
			}

			recoverOnce(t, m, tc.repaired)
			after, err := m.Doctor(ctx)
			if err != nil {
				t.Fatalf("Doctor after Recover: %v", err)
			}
			if tc.repaired.Zero() {
				if diff := cmp.Diff([]ratelimit.Problem{want}, after.Problems); diff != "" {
					t.Fatalf("recovery cannot repair %s, yet the problems changed (-want +got):\n%s", kind, diff)
				}
			} else if !after.OK() {
				t.Fatalf("after Recover: %s", after)
			}
		})
	}
}

func corruptCounter(t *testing.T, conn db.DBTX, r ratelimit.Reservation, reserved, used float64) {
	t.Helper()
	n, err := testq.OpsCounterCorruptAdd(context.Background(), conn, dbtest.OpsCounterCorruptAddParams{
		ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Metric: r.Metric, ReservedDelta: reserved, UsedDelta: used,
	})
	if err != nil || n != 1 {
		t.Fatalf("OpsCounterCorruptAdd = %d, %v", n, err)
	}
}

// An open block of a Local limit whose counter row is gone holds its
// granted units nowhere, and its return will charge nothing: the doctor
// names it (it used to say the books balance) and Recover cannot repair it.
func TestDoctorSeesAnOpenBlockWithoutItsCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	key := uniqueKey("blk")
	_, _, block := oneOpenBlock(t, pool, key)
	n, err := testq.OpsCounterCorruptDelete(ctx, pool, dbtest.OpsCounterCorruptDeleteParams{ScopeType: "model", ScopeKey: key, Metric: ratelimit.MetricTokens})
	if err != nil || n != 1 {
		t.Fatalf("OpsCounterCorruptDelete = %d, %v", n, err)
	}
	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) != 1 {
		t.Fatalf("Doctor: %s; want one problem: the open block whose counter row is gone", report)
	}
	p := report.Problems[0]
	if p.Kind != ratelimit.ProblemAllotmentWithoutCounter || p.ScopeKey != key || p.Actual != block.Granted || p.Kind.Recoverable() {
		t.Errorf("problem %+v, want %s of the block's %g granted units, not recoverable", p, ratelimit.ProblemAllotmentWithoutCounter, block.Granted)
	}
}

// oneOpenBlock makes a Limiter with allotments (closed when the test ends)
// and reserves 10 of a Local limit of 1000 on key, which opens one block:
// it returns the Limiter, the grant and that block, for a test to damage
// the books around.
func oneOpenBlock(t *testing.T, pool *pgxpool.Pool, key string) (*ratelimit.Limiter, ratelimit.Grant, dbtest.AllotmentListByScopeRow) {
	t.Helper()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	t.Cleanup(l.Close)
	hour := hourWindow(t, pool)
	g := reserveLocal(t, l, hour, key, 1000, 10)
	open := openBlocks(t, pool, key)
	if len(open) != 1 {
		t.Fatalf("open blocks = %d, want 1", len(open))
	}
	return l, g, open[0]
}
