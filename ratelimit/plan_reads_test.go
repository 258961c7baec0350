package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// oneSessionPool is a pool of one connection to a database of the test's
// own: the plans a test has that session build are the ones it measures.
func oneSessionPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
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
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	before, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	op(tx)
	after, err := testq.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	reads := make(map[string]int64, len(after))
	for i, a := range after {
		reads[a.TableName] = a.IndexEntriesRead - before[i].IndexEntriesRead
	}
	return reads
}
