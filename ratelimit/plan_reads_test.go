package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// oneSessionPool is a pool of one connection to a database of the test's
// own: the plans a test has that session build are the ones it measures.
func oneSessionPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return oneSessionPoolOn(t, pgtest.NewURL(t))
}

// oneSessionPoolOn is a pool of one connection to url's database, closed
// when the test ends.
func oneSessionPoolOn(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// indexReads runs op in a transaction that it rolls back, and returns how
// many index entries op read of each table.
func indexReads(t *testing.T, pool *pgxpool.Pool, op func(tx pgx.Tx)) map[string]int64 {
	t.Helper()
	reads := map[string]int64{}
	for _, d := range tableReads(t, pool, func(tx pgx.Tx) error { op(tx); return nil }) {
		reads[d.TableName] = d.IndexEntriesRead
	}
	return reads
}

// planReads is tableReads of fn under a generic plan when generic is set
// (PlanCacheForceGeneric first, in fn's transaction), under the one the
// planner picks otherwise.
func planReads(t *testing.T, pool *pgxpool.Pool, generic bool, fn func(pgx.Tx) error) []dbtest.TableScansInTransactionRow {
	t.Helper()
	return tableReads(t, pool, func(tx pgx.Tx) error {
		if generic {
			if err := testq.PlanCacheForceGeneric(context.Background(), tx); err != nil {
				return err
			}
		}
		return fn(tx)
	})
}

// tableReads runs fn in a transaction that it rolls back, and returns how
// fn read each table: its sequential scans, index scans and index entries.
func tableReads(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) []dbtest.TableScansInTransactionRow {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The counters also hold what earlier transactions of this connection
	// have not flushed yet; none are flushed inside a transaction, so the
	// difference is fn's own.
	before, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatalf("TableScansInTransaction: %v", err)
	}
	if err := fn(tx); err != nil {
		t.Fatalf("flow: %v", err)
	}
	after, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatalf("TableScansInTransaction: %v", err)
	}
	for i := range after {
		after[i].SeqScans -= before[i].SeqScans
		after[i].IndexScans -= before[i].IndexScans
		after[i].IndexEntriesRead -= before[i].IndexEntriesRead
	}
	return after
}
