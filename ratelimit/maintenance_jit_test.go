package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover, Prune and Doctor run their transactions with jit off: their
// statements are planned for large tables (a full Doctor over 1.6 M
// counters spent 11.9 s of 40.7 s compiling), and JIT costs these bounded
// batches more than it saves. The setting is the transaction's own: a
// session that had jit on has it on again after each call, on the same
// connection (safe behind a transaction-pooling proxy). Every exec mode
// and both ways a bound is set (in a statement's batch, or in a
// transaction of its own begun first): a trigger on each table refuses a
// write made with jit on, and the database's sessions start with it on.
func TestMaintenanceTransactionsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		for _, bound := range []time.Duration{0, 5 * time.Second} {
			t.Run(mode.String()+"/lock_timeout="+bound.String(), func(t *testing.T) {
				t.Parallel()
				maintenanceWithoutJIT(t, mode, bound)
			})
		}
	}
}

func maintenanceWithoutJIT(t *testing.T, mode pgx.QueryExecMode, bound time.Duration) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	var clock testClock

	// Work for each step kind, written before the trap is armed: a task
	// that dies holding a reservation (Recover reclaims it, in a
	// transaction of its own), a lease that expires, a task that finishes.
	setupPool := poolsOn(t, url, 1, mode)[0]
	l, _ := clocked(setupPool, &clock)
	key := uniqueKey("jit")
	dead := startSync(t, l, time.Second)
	if _, err := l.Reserve(ctx, dead.ID, dead.AttemptID, []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1000, 10)}); err != nil {
		t.Fatal(err)
	}
	lease := concurrent("model", key, 10)
	lease.LeaseTTL = time.Minute
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lease}); err != nil {
		t.Fatal(err)
	}
	done := startSync(t, l, time.Hour)
	if _, err := l.FinishTask(ctx, done.ID, done.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := testq.OpsRefuseWritesUnderJIT(ctx, setupPool); err != nil {
		t.Fatalf("OpsRefuseWritesUnderJIT: %v", err)
	}
	setupPool.Close()

	pool := oneConnPool(t, url, mode) // a session opened now: jit on
	checkJIT := func(when, want string) {
		t.Helper()
		got, err := testq.OpsCurrentJIT(ctx, pool)
		if err != nil || got != want {
			t.Fatalf("%s: jit = %q (%v) on the session, want %q", when, got, err, want)
		}
	}
	checkJIT("before maintenance", "on")
	// The trap is armed: a write of its own, with the session's jit, is refused.
	if _, err := queries.PruneCounters(ctx, pool, db.PruneCountersParams{Cutoff: time.Now(), BatchSize: 1}); err == nil || !strings.Contains(err.Error(), "jit is on") {
		t.Fatalf("a write with jit on: %v, want the trap's refusal", err)
	}

	opts := []ratelimit.MaintenanceOption{ratelimit.WithMaintenanceClock(clock.now)}
	if bound > 0 {
		opts = append(opts, ratelimit.WithMaintenanceLockTimeout(bound))
	}
	m := ratelimit.NewMaintenance(pool, opts...)

	clock.advance(2 * time.Minute)
	rec, err := m.Recover(ctx)
	if err != nil || rec.FailedTasks != 1 || rec.ReleasedRateReservations != 1 || rec.ReleasedConcurrencyLeases != 1 {
		t.Fatalf("Recover = %+v, %v; want the dead task failed, its reservation and the expired lease released", rec, err)
	}
	checkJIT("after Recover", "on")

	clock.advance(ratelimit.DefaultTaskRetention + time.Hour)
	pr, err := m.Prune(ctx, time.Minute)
	if err != nil || pr.Tasks != 2 || pr.Counters == 0 || pr.Reservations == 0 || pr.Leases == 0 {
		t.Fatalf("Prune = %+v, %v; want both tasks, the window, its reservation and the lease deleted", pr, err)
	}
	checkJIT("after Prune", "on")

	report, err := m.Doctor(ctx)
	if err != nil || !report.OK() {
		t.Fatalf("Doctor = %s, %v", report, err)
	}
	checkJIT("after Doctor", "on")
	// Doctor only reads: what its statement runs with, read back by a
	// statement sent the same way.
	if jit, err := m.DoctorJIT(ctx); err != nil || jit != "off" {
		t.Fatalf("Doctor's statement runs with jit %q (%v), want off", jit, err)
	}
	checkJIT("after DoctorJIT", "on")
}

// oneConnPool is a pool of one connection on url executing statements in
// mode, closed when t ends: what a call leaves on its session, the next
// statement sees.
func oneConnPool(t *testing.T, url string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
