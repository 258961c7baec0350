package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A batch of PruneTasks leaves the ledgers as the foreign keys' actions
// would (a deleted task's or attempt's reservations and leases stay, with
// task_id and attempt_id NULL; an attempt of a task kept stays named),
// deletes the tasks' attempts, events and queue admissions, and nothing
// of the tasks it keeps; and it updates each ledger row once. The keys'
// actions, a statement per row, updated a reservation twice (task_id, then
// attempt_id once its attempt went) and took three quarters of a batch's
// time: the statement now updates the rows of the whole batch itself,
// before the keys' actions, which find nothing left.
func TestPruneTasksUpdatesEachLedgerRowOnceAsTheKeysWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, _ := clocked(pool, &clock)
	key := uniqueKey("ledger")
	limits := []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricTokens, 1e9, 5),
		window("api_key", key, ratelimit.MetricRequests, 1e9, 1),
		concurrent("model", key, 1e6),
	}
	limits[0].Window, limits[1].Window = ratelimit.MaxWindow, ratelimit.MaxWindow
	limits[2].LeaseTTL = ratelimit.MaxLeaseTTL

	// old: tasks that finished, each with an attempt, two reservations and
	// a lease of that attempt, and events.
	const tasks = 20
	old := make([]ratelimit.Task, tasks)
	for i := range old {
		old[i] = startSync(t, l, time.Hour, queueLimit(key, 1e6))
		if _, err := l.Reserve(ctx, old[i].ID, old[i].AttemptID, limits); err != nil {
			t.Fatal(err)
		}
		if _, err := l.FinishTask(ctx, old[i].ID, old[i].ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	// And one cancelled by a writer that did none of the cleanup: it keeps
	// its queue place (finished now on the database's clock, long before
	// the test clock's cutoff below).
	abandoned := createAsync(t, l, queueLimit(key, 1e6))
	if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: mustUUID(t, abandoned.ID), Status: ratelimit.TaskCancelled}); err != nil || n != 1 {
		t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
	}
	clock.advance(8 * 24 * time.Hour)
	// Kept: a running task, and one finished within the retention.
	running := startSync(t, l, time.Hour, queueLimit(key, 1e6))
	if _, err := l.Reserve(ctx, running.ID, running.AttemptID, limits); err != nil {
		t.Fatal(err)
	}
	recent := startSync(t, l, time.Hour)
	if _, err := l.Reserve(ctx, recent.ID, recent.AttemptID, limits); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FinishTask(ctx, recent.ID, recent.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}

	holdings := func(conn db.DBTX) map[[16]byte]dbtest.OpsHoldingsByScopeRow {
		t.Helper()
		out := map[[16]byte]dbtest.OpsHoldingsByScopeRow{}
		for _, scope := range []string{"api_key", "model"} {
			rows, err := testq.OpsHoldingsByScope(ctx, conn, dbtest.OpsHoldingsByScopeParams{ScopeType: scope, ScopeKey: key})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				out[r.ID.Bytes] = r
			}
		}
		return out
	}
	// Rows no pgadmit function writes, which a foreign writer may: a
	// reservation of an old task attached to the running task's attempt,
	// and a lease of an old task's attempt without its task.
	before := holdings(pool)
	var crossed, attemptOnly pgtype.UUID
	for _, h := range before {
		switch {
		case h.Kind == "reservation" && h.TaskID.Bytes == mustUUID(t, old[0].ID).Bytes && !crossed.Valid:
			crossed = h.ID
		case h.Kind == "lease" && h.TaskID.Bytes == mustUUID(t, old[1].ID).Bytes:
			attemptOnly = h.ID
		}
	}
	relink := func(id, task, attempt pgtype.UUID) {
		t.Helper()
		if n, err := testq.OpsLedgerRowRelink(ctx, pool, dbtest.OpsLedgerRowRelinkParams{ID: id, TaskID: task, AttemptID: attempt}); err != nil || n != 1 {
			t.Fatalf("OpsLedgerRowRelink = %d, %v", n, err)
		}
	}
	relink(crossed, mustUUID(t, old[0].ID), mustUUID(t, running.AttemptID))
	relink(attemptOnly, pgtype.UUID{}, mustUUID(t, old[1].AttemptID))
	before = holdings(pool)

	// What the keys' actions would leave: NULL where the task or attempt named is deleted.
	deleted := map[[16]byte]bool{}
	for _, task := range old {
		deleted[mustUUID(t, task.ID).Bytes] = true
		deleted[mustUUID(t, task.AttemptID).Bytes] = true
	}
	want := map[[16]byte]dbtest.OpsHoldingsByScopeRow{}
	for id, h := range before {
		if h.TaskID.Valid && deleted[h.TaskID.Bytes] {
			h.TaskID = pgtype.UUID{}
		}
		if h.AttemptID.Valid && deleted[h.AttemptID.Bytes] {
			h.AttemptID = pgtype.UUID{}
		}
		want[id] = h
	}
	if want[crossed.Bytes].AttemptID != mustUUID(t, running.AttemptID) || want[attemptOnly.Bytes].AttemptID.Valid {
		t.Fatalf("fixture: the crossed reservation %+v, the attempt-only lease %+v", want[crossed.Bytes], want[attemptOnly.Bytes])
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	countsBefore := rowCounts(t, tx)
	writesBefore, err := testq.TupleWritesInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := queries.PruneTasks(ctx, tx, db.PruneTasksParams{Cutoff: clock.now().Add(-7 * 24 * time.Hour), BatchSize: 100})
	if err != nil || n != tasks+1 {
		t.Fatalf("PruneTasks = %d, %v; want the %d old tasks and the abandoned one deleted", n, err, tasks)
	}
	writes, err := testq.TupleWritesInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, holdings(tx)); diff != "" {
		t.Errorf("ledger rows after PruneTasks, not as the foreign keys would leave them (-want +got):\n%s", diff)
	}
	wantCounts := countsBefore
	wantCounts.Tasks -= tasks + 1
	wantCounts.Attempts -= tasks
	// Events: the old tasks' (task.running, task.completed each) and the
	// abandoned one's (task.queued). The old tasks' queue places went when
	// they finished; the abandoned one's goes with it, the running task's
	// stays.
	wantCounts.Events -= 2*tasks + 1
	wantCounts.Admissions--
	if diff := cmp.Diff(wantCounts, rowCounts(t, tx)); diff != "" {
		t.Errorf("rows after PruneTasks (-want +got):\n%s", diff)
	}
	for _, task := range []ratelimit.Task{running, recent} {
		if _, err := l.WithTx(tx).GetTask(ctx, task.ID); err != nil {
			t.Errorf("task %s kept by PruneTasks: %v", task.ID, err)
		}
	}
	updated := map[string]int64{}
	for i, w := range writes {
		updated[w.TableName] = w.Updated - writesBefore[i].Updated
	}
	// Each of the old tasks' ledger rows updated once: two reservations
	// and a lease per task.
	if updated["gateway_rate_limit_reservations"] != 2*tasks || updated["gateway_concurrency_leases"] != tasks {
		t.Errorf("PruneTasks updated %d reservations and %d leases of %d tasks holding 2 and 1 each; want each row updated once",
			updated["gateway_rate_limit_reservations"], updated["gateway_concurrency_leases"], tasks)
	}
}
