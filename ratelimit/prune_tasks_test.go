package ratelimit_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Finished tasks are kept for the task retention, then deleted with their
// attempts, events and queue admissions; the ledger rows they held stay,
// with no task, so the books still balance. Live tasks and tasks finished
// more recently stay whole.
func TestPruneDeletesFinishedTasksAfterTheirRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithPruneBatchSize(1))
	key := uniqueKey("k")
	yearly := window("api_key", key, ratelimit.MetricTokens, 1e9, 10)
	yearly.Window = ratelimit.MaxWindow
	lease := concurrent("model", key, 10)
	lease.LeaseTTL = ratelimit.MaxLeaseTTL

	// old: finished now, holding a committed reservation of a yearly window
	// and a lease released when it finished; it queued on "q".
	old := startSync(t, l, time.Hour, queueLimit(key, 10))
	g, err := l.Reserve(ctx, old.ID, old.AttemptID, []ratelimit.Limit{yearly, lease})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := l.AppendEvent(ctx, old.ID, old.ExecutionToken, ratelimit.Event{Type: "task.progress"}); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}
	if _, err := l.FinishTask(ctx, old.ID, old.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	// Three days later: recent finishes; a running and a queued task stay live.
	clock.advance(3 * 24 * time.Hour)
	recent := startSync(t, l, time.Hour)
	if _, err := l.FinishTask(ctx, recent.ID, recent.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "x"}); err != nil {
		t.Fatalf("FinishTask(recent): %v", err)
	}
	running := startSync(t, l, time.Hour)
	queued := createAsync(t, l, queueLimit(key, 10))

	clock.advance(4*24*time.Hour + time.Minute) // a week and a minute after old finished
	before := rowCounts(t, pool)
	got, err := m.Prune(ctx, 24*time.Hour)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if want := (ratelimit.PruneResult{Tasks: 1, Leases: 1}); !cmp.Equal(want, got, cmpopts.IgnoreFields(ratelimit.PruneResult{}, "Cutoff", "TaskCutoff")) {
		t.Fatalf("Prune = %+v, want %+v", got, want)
	}
	if d := got.Cutoff.Sub(got.TaskCutoff); d != ratelimit.DefaultTaskRetention-24*time.Hour {
		t.Fatalf("cutoffs %s and %s are %s apart, want the task retention minus a day", got.Cutoff, got.TaskCutoff, d)
	}
	after := rowCounts(t, pool)
	want := before
	want.Tasks--     // old
	want.Attempts--  // its one attempt
	want.Events -= 3 // task.running, task.progress, task.completed
	want.Leases--    // released at its finish more than a day ago (not because the task went)
	if diff := cmp.Diff(want, after); diff != "" {
		t.Fatalf("rows after prune (-want +got):\n%s", diff)
	}
	if _, err := l.GetTask(ctx, old.ID); err == nil {
		t.Fatalf("old task still there")
	}
	for _, id := range []string{recent.ID, running.ID, queued.ID} {
		getTask(t, l, id)
	}
	// old's reservation stays in its (yearly) window's books, with no task
	// and no attempt.
	holdings, err := testq.OpsHoldingsByScope(ctx, pool, dbtest.OpsHoldingsByScopeParams{ScopeType: "api_key", ScopeKey: key})
	if err != nil {
		t.Fatalf("OpsHoldingsByScope: %v", err)
	}
	if len(holdings) != 1 || holdings[0].ID.String() != g.Reservations[0].ID || holdings[0].TaskID.Valid || holdings[0].AttemptID.Valid {
		t.Fatalf("old's ledger rows after its task went: %+v", holdings)
	}
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)

	// Nothing more to do; and with retention off, nothing at all.
	if again, err := m.Prune(ctx, 24*time.Hour); err != nil || again.Tasks != 0 {
		t.Fatalf("second Prune = %+v, %v", again, err)
	}
	clock.advance(365 * 24 * time.Hour)
	_, keep := clocked(pool, &clock, ratelimit.WithTaskRetention(-1))
	kept, err := keep.Prune(ctx, 24*time.Hour)
	if err != nil || kept.Tasks != 0 || !kept.TaskCutoff.IsZero() || !strings.Contains(kept.String(), "finished tasks kept") {
		t.Fatalf("Prune with task retention off = %+v, %v", kept, err)
	}
	if n := rowCounts(t, pool).Tasks; n != 3 {
		t.Fatalf("%d tasks left, want 3", n)
	}
}

// statementCounter counts the statements a pool sends, by sqlc name: on
// their own or in a batch (Maintenance sends each of its statements in a
// batch behind its settings).
type statementCounter struct {
	name string
	n    atomic.Int64
}

func (c *statementCounter) count(sql string) {
	if strings.HasPrefix(sql, "-- name: "+c.name+" ") {
		c.n.Add(1)
	}
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// countingPool is a pool of a fresh database whose statements named name
// the returned counter counts.
func countingPool(t *testing.T, name string) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	counter := &statementCounter{name: name}
	return poolTracedBy(t, counter), counter
}

// poolTracedBy is a pool of a fresh database whose connections report to
// tracer, closed when the test ends.
func poolTracedBy(t *testing.T, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Each Prune walks only the tasks that finished since the last one: the
// walk over finished tasks whose events go resumes from the position the
// previous run saved, instead of starting at the epoch each time.
func TestPruneEventsResumeWhereTheLastRunStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, pages := countingPool(t, "PruneEvents")
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithPruneEvents(true), ratelimit.WithPruneBatchSize(1))

	finish := func(n int) {
		t.Helper()
		for range n {
			task := startSync(t, l, time.Hour)
			if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
				t.Fatalf("FinishTask: %v", err)
			}
		}
		clock.advance(2 * time.Second)
	}
	prune := func(wantEvents, wantPages int64) {
		t.Helper()
		pages.n.Store(0)
		got, err := m.Prune(ctx, time.Second)
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if got.Events != wantEvents || pages.n.Load() != wantPages {
			t.Fatalf("Prune deleted %d events in %d pages, want %d in %d", got.Events, pages.n.Load(), wantEvents, wantPages)
		}
	}
	finish(5)
	prune(5*2, 5+1) // task.running and task.completed of each; one page per task, and an empty one
	finish(3)
	prune(3*2, 3+1) // only the new tasks are read
	prune(0, 1)
	if n := rowCounts(t, pool); n.Tasks != 8 || n.Events != 0 {
		t.Fatalf("rows = %+v, want 8 tasks without events", n)
	}
}

// Prune does not delete a finished task that still holds an open
// reservation or an unreleased lease (left by a foreign writer, or by a
// FinishTask in a caller's transaction, which Recover releases): deleting it would set their task_id
// to NULL, where Recover no longer finds them, and the reservation would
// hold its window's capacity until the window ended. Once Recover has
// released them, the next Prune deletes the task.
func TestPruneKeepsAFinishedTaskUntilRecoverReleasedWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithTaskRetention(time.Hour))
	key := uniqueKey("k")
	long := window("api_key", key, ratelimit.MetricTokens, 1000, 100)
	long.Window = ratelimit.MaxWindow // not ended when Prune runs: only Recover may release it
	lease := concurrent("model", key, 10)
	lease.LeaseTTL = ratelimit.MaxLeaseTTL
	task := startSync(t, l, time.Hour)

	// The task finishes with a grant open: finished by a writer that does
	// none of FinishTask's cleanup. (A Reserve for the task that committed
	// after FinishTask read what the task holds used to leave it so; now
	// the two exclude each other: TestReserveRacingFinishTaskLeavesNothingOpen.)
	if _, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{long, lease}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, task.ID), Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
		t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
	}

	clock.advance(2 * time.Hour) // past the task retention
	if got, err := m.Prune(ctx, time.Minute); err != nil || got.Tasks != 0 {
		t.Fatalf("Prune = %+v, %v; want the task kept while it holds a reservation and a lease", got, err)
	}
	got, err := m.Recover(ctx)
	if err != nil || got.ReleasedRateReservations != 1 || got.ReleasedConcurrencyLeases != 1 {
		t.Fatalf("Recover = %+v, %v; want the finished task's reservation and lease released", got, err)
	}
	assertCounter(t, pool, key, ratelimit.MetricTokens, 0, 0)
	if got, err := m.Prune(ctx, time.Minute); err != nil || got.Tasks != 1 {
		t.Fatalf("Prune after Recover = %+v, %v; want the task deleted", got, err)
	}
}
