package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A batch of PruneReservations reads the reservations it pages through and
// deletes the doomed ones by primary key: the index entries it reads are a
// few per row of the batch, however large the ledger. (With the page
// joined to the table, the planner chose, for a batch of thousands of
// rows, a merge join that read the whole primary key of the ledger in
// every batch.)
func TestPruneReservationsReadsOnlyItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 4_000
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	now, err := queries.PruneCutoff(ctx, tx, db.PruneCutoffParams{OlderThanSeconds: 0})
	if err != nil {
		t.Fatal(err)
	}
	// The counters of every ended window go first, as Prune's step before:
	// the reservations of those windows are then doomed.
	if n, err := queries.PruneCounters(ctx, tx, db.PruneCountersParams{Cutoff: now, BatchSize: rows}); err != nil || n < rows/2 {
		t.Fatalf("PruneCounters = %d, %v", n, err)
	}
	before, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	row, err := queries.PruneReservations(ctx, tx, db.PruneReservationsParams{
		WindowSeconds: 60, StartsBefore: now.Add(-60e9), AfterID: pgtype.UUID{Valid: true}, BatchSize: batch,
	})
	if err != nil {
		t.Fatalf("PruneReservations: %v", err)
	}
	if row.Scanned != batch || row.Deleted != batch {
		t.Fatalf("PruneReservations read %d and deleted %d, want %d and %d", row.Scanned, row.Deleted, batch, batch)
	}
	after, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range after {
		if a.TableName != "gateway_rate_limit_reservations" {
			continue
		}
		read := a.IndexEntriesRead - before[i].IndexEntriesRead
		if a.SeqScans > before[i].SeqScans || read > 3*batch {
			t.Errorf("a batch of %d read %d index entries of the ledger's %d rows (and %d sequential scans): more than its batch",
				batch, read, rows, a.SeqScans-before[i].SeqScans)
		}
	}
}

// After a VACUUM at a quiet moment (no lease live) records the partial
// indexes of live leases as empty, a batch of PruneTasks still probes each
// task's leases by its id: it read, for every task it looked at, every
// live lease through gateway_concurrency_leases_live_scope_idx (which the
// planner took for empty), so a batch cost tasks × live leases.
func TestPruneTasksProbesLeasesAfterAQuietVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	const batch = 500
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil { // every fixture lease is released
		t.Fatalf("LedgersVacuumAnalyze: %v", err)
	}
	// Then traffic: live leases, as many as a call takes at once.
	live := 0
	for range 30 {
		var limits []ratelimit.Limit
		for range ratelimit.MaxLimitsPerCall {
			limits = append(limits, concurrent("model", uniqueKey("busy"), 10))
		}
		if _, err := l.Reserve(ctx, "", "", limits); err != nil {
			t.Fatal(err)
		}
		live += len(limits)
	}

	var n int64
	reads := indexReads(t, pool, func(tx pgx.Tx) {
		var err error
		n, err = queries.PruneTasks(ctx, tx, db.PruneTasksParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
		if err != nil || n == 0 {
			t.Fatalf("PruneTasks = %d, %v; want some of the fixture's finished tasks deleted", n, err)
		}
	})
	if read := reads["gateway_concurrency_leases"]; read > 4*int64(batch) {
		t.Errorf("a batch of %d tasks read %d index entries of the leases (%d of them live): more than a probe per task", n, read, live)
	}
}

// A batch of PruneReservations asks whether each row's counter is gone by
// a probe of the counters' primary key, not by reading every counter kept:
// the counters of the windows within the retention stay, as many as the
// windows and scopes of a day, and a NOT EXISTS was hashed over all of
// them, once per batch.
func TestPruneReservationsProbesCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 4_000
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	cutoff := pruneOlderHalfOfCounters(t, pool, rows)
	var row db.PruneReservationsRow
	reads := tableReads(t, pool, func(tx pgx.Tx) error {
		var err error
		row, err = queries.PruneReservations(ctx, tx, db.PruneReservationsParams{
			WindowSeconds: 60, StartsBefore: cutoff.Add(-60e9), AfterID: pgtype.UUID{Valid: true}, BatchSize: batch,
		})
		return err
	})
	if row.Scanned != batch || row.Deleted != batch {
		t.Fatalf("PruneReservations read %d and deleted %d, want %d and %d", row.Scanned, row.Deleted, batch, batch)
	}
	for _, r := range reads {
		if r.TableName == "gateway_rate_limit_counters" && r.SeqScans > 0 {
			t.Errorf("a batch of %d read the counters kept (%d sequential scans) instead of probing each row's counter", batch, r.SeqScans)
		}
	}
}

// A batch of PruneAllotments walks the ended blocks in expiry order and
// probes each one's counter by primary key, also on a generic plan: with a
// NOT EXISTS, the planner anti-joined every block and every counter kept,
// sorting both, once per batch.
func TestPruneAllotmentsProbesCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 4_000
	fillWithAllotments(t, pool, rows, testq.FixtureFillAllotments)
	cutoff := pruneOlderHalfOfCounters(t, pool, rows)
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil { // the allotments' statistics too
		t.Fatalf("LedgersVacuumAnalyze: %v", err)
	}
	assertBatchReadsItsBatch(t, pool, "PruneAllotments", batch, pruneAllotments(cutoff, batch))
}

// Within one Prune run the counters step deletes the counters of every
// ended window just before the allotments step, which is therefore planned
// on statistics taken while those counters still existed (autovacuum has
// not analyzed the table since, if it runs at all). The planner then
// expects every ended block to still have its counter, and a NOT EXISTS
// became a merge anti-join of all ended blocks with every counter, both
// read whole and sorted on disk, in every batch (1.4 s a batch of 5,000
// with 500,000 blocks, against 35 ms). Each block's counter must be
// probed by primary key whatever the statistics say.
func TestPruneAllotmentsProbesCountersOnStatisticsOfBeforeTheCountersStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 4_000
	fillWithAllotments(t, pool, rows, testq.FixtureFillAllotments)
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil { // the allotments' statistics too
		t.Fatalf("LedgersVacuumAnalyze: %v", err)
	}
	cutoff := pruneOlderHalfOfCountersUnanalyzed(t, pool, rows) // as Prune's counters step, no ANALYZE after
	assertBatchReadsItsBatch(t, pool, "PruneAllotments", batch, pruneAllotments(cutoff, batch))
}

// A table whose blocks lie in an order unrelated to their windows (blocks
// of a day's window among a minute's, the space of pruned blocks reused:
// months of traffic) still has each batch of PruneAllotments walk the
// ended blocks in expiry order and stop at its batch. The planner took a
// block's "counter is gone" test to pass for 0.5% of blocks, so it
// expected to need every ended block for a batch, and its custom plan
// (every plan in pgx's exec mode, the mode advised behind PgBouncer) read
// all of them, probed each one's counter and sorted them, in every batch.
func TestPruneAllotmentsWalksScatteredBlocksInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 4_000
	fillWithAllotments(t, pool, rows, testq.FixtureFillAllotmentsScattered)
	cutoff := pruneOlderHalfOfCounters(t, pool, rows)
	if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil { // the allotments' statistics too
		t.Fatalf("LedgersVacuumAnalyze: %v", err)
	}
	assertBatchReadsItsBatch(t, pool, "PruneAllotments", batch, pruneAllotments(cutoff, batch))
}

// The same for PruneTasks: FixtureFill's finish times cycle through 27
// hours, so the finished tasks lie in an order unrelated to their finish
// time, as they do once tasks of different lengths have run for a while.
// The planner took each of the two "holds nothing" tests to pass for 0.5%
// of tasks (0.0025% for both), read every task finished before the
// cutoff, probed both ledgers for each and sorted them, in every batch.
func TestPruneTasksWalksScatteredTasksInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 500
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	var cutoff time.Time
	func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		cutoff = dayAgo(t, tx)
	}()
	assertBatchReadsItsBatch(t, pool, "PruneTasks", batch, func(tx pgx.Tx) (int64, error) {
		return queries.PruneTasks(ctx, tx, db.PruneTasksParams{Cutoff: cutoff, BatchSize: batch})
	})
}

// fillWithAllotments fills pool's database with the fixture of rows rows
// (FixtureFill) and rows returned blocks in its windows, written by fill
// (FixtureFillAllotments, or FixtureFillAllotmentsScattered).
func fillWithAllotments(t *testing.T, pool *pgxpool.Pool, rows int32, fill func(context.Context, dbtest.DBTX, int32) error) {
	t.Helper()
	ctx := context.Background()
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := fill(ctx, pool, rows); err != nil {
		t.Fatalf("filling the allotments: %v", err)
	}
}

// assertBatchReadsItsBatch runs step, a prune statement deleting a batch
// of batch rows, on pool, under the planner's plan and a generic one, each
// in a transaction rolled back, and fails t unless each deletes a full
// batch reading no table by a sequential scan and at most three index
// entries per row.
func assertBatchReadsItsBatch(t *testing.T, pool *pgxpool.Pool, name string, batch int64, step func(pgx.Tx) (int64, error)) {
	t.Helper()
	for _, generic := range []bool{false, true} {
		var n int64
		reads := planReads(t, pool, generic, func(tx pgx.Tx) error {
			var err error
			n, err = step(tx)
			return err
		})
		if n != batch {
			t.Fatalf("%s (generic plan: %t) deleted %d, want a full batch of %d", name, generic, n, batch)
		}
		for _, r := range reads {
			if r.SeqScans > 0 || r.IndexEntriesRead > 3*batch {
				t.Errorf("%s: a batch of %d (generic plan: %t) read %s: %d sequential scans, %d index entries; want its batch",
					name, batch, generic, r.TableName, r.SeqScans, r.IndexEntriesRead)
			}
		}
	}
}

// pruneAllotments is a batch of PruneAllotments, for assertBatchReadsItsBatch.
func pruneAllotments(cutoff time.Time, batch int32) func(pgx.Tx) (int64, error) {
	return func(tx pgx.Tx) (int64, error) {
		return queries.PruneAllotments(context.Background(), tx, db.PruneAllotmentsParams{Cutoff: cutoff, BatchSize: batch})
	}
}

// pruneOlderHalfOfCounters prunes the counters of the older half of the
// windows of a fixture of rows rows (one window a minute per hundred rows),
// as Prune's step before the ledgers', analyzes the tables and returns the
// cutoff: the newer half stays.
func pruneOlderHalfOfCounters(t *testing.T, pool *pgxpool.Pool, rows int32) time.Time {
	t.Helper()
	cutoff := pruneOlderHalfOfCountersUnanalyzed(t, pool, rows)
	if err := testq.TablesAnalyze(context.Background(), pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	return cutoff
}

// pruneOlderHalfOfCountersUnanalyzed is pruneOlderHalfOfCounters without
// the ANALYZE: the planner still counts the deleted counters.
func pruneOlderHalfOfCountersUnanalyzed(t *testing.T, pool *pgxpool.Pool, rows int32) time.Time {
	t.Helper()
	ctx := context.Background()
	cutoff, err := queries.PruneCutoff(ctx, pool, db.PruneCutoffParams{OlderThanSeconds: float64(rows / 100 / 2 * 60)})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := queries.PruneCounters(ctx, pool, db.PruneCountersParams{Cutoff: cutoff, BatchSize: rows}); err != nil || n < int64(rows/4) {
		t.Fatalf("PruneCounters = %d, %v", n, err)
	}
	return cutoff
}

// Each of Prune's delete statements reads about its batch, whatever the
// table holds: the counter windows, released leases, events of finished
// tasks and finished tasks (with the rows their foreign keys delete or
// update) are found through the index its query comment names, in its
// order, and deleted by key. A plan that read the history whole (a
// sequential scan, or every entry of an index) would make each batch cost
// the table, and a first prune after months cost batches × table.
func TestPruneStepsReadOnlyTheirBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const rows, batch = 40_000, 2_000
	if err := testq.FixtureFill(ctx, pool, rows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	// The older half of the fixture's windows ended before it, and most of
	// its released leases and finished tasks (spread over 27 hours).
	cutoff, err := queries.PruneCutoff(ctx, pool, db.PruneCutoffParams{OlderThanSeconds: float64(rows / 100 / 2 * 60)})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]func(tx pgx.Tx) (int64, error){
		"PruneCounters": func(tx pgx.Tx) (int64, error) {
			return queries.PruneCounters(ctx, tx, db.PruneCountersParams{Cutoff: cutoff, BatchSize: batch})
		},
		"PruneLeasesReleased": func(tx pgx.Tx) (int64, error) {
			return queries.PruneLeasesReleased(ctx, tx, db.PruneLeasesReleasedParams{Cutoff: cutoff, BatchSize: batch})
		},
		"PruneEvents": func(tx pgx.Tx) (int64, error) {
			row, err := queries.PruneEvents(ctx, tx, db.PruneEventsParams{Cutoff: cutoff, AfterID: pgtype.UUID{Valid: true}, BatchSize: batch})
			return int64(row.Deleted), err
		},
		"PruneTasks": func(tx pgx.Tx) (int64, error) {
			return queries.PruneTasks(ctx, tx, db.PruneTasksParams{Cutoff: cutoff, BatchSize: batch})
		},
	}
	for name, step := range steps {
		assertBatchReadsItsBatch(t, pool, name, batch, step)
	}
	// A small batch against the counters too: PruneCounters joined its
	// locked batch back to the counters by key, and the plans of a batch of
	// 500 hashed it and read the whole table to probe it (about 76 ms on
	// 74,000 counters, in each batch of a prune); it deletes by tuple id.
	const small = 500
	assertBatchReadsItsBatch(t, pool, "PruneCounters", small, func(tx pgx.Tx) (int64, error) {
		return queries.PruneCounters(ctx, tx, db.PruneCountersParams{Cutoff: cutoff, BatchSize: small})
	})
}
