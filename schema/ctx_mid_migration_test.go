package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// A migrator whose context ends while a migration runs (00005's CREATE INDEX CONCURRENTLY,
// waiting for a transaction) returns the context's error and leaves the lock row free: the
// next Migrate takes it at once, completes the migrations and leaves the catalog of a
// database migrated straight up (no invalid index behind).
func TestMigrateWhoseContextEndsMidMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 2)
	want := fingerprint(t, pools[0])
	migratedDownTo(t, pools[0], concurrentIndexVersion-1)

	tx, err := pools[1].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := dbtest.New().OpsReservationCorruptFinalized(ctx, tx, pgtype.UUID{Valid: true}); err != nil {
		t.Fatalf("write in the blocking transaction: %v", err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- schema.Migrate(mctx, pools[0]) }()
	pgtest.AwaitLockWaiters(t, pools[1], "the migrator")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Migrate cancelled mid-migration = %v, want context.Canceled", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	start := time.Now()
	if err := schema.Migrate(again, pools[0]); err != nil {
		t.Fatalf("Migrate after a cancelled one: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Migrate after a cancelled one took %s: the lock row was not given up", took)
	}
	assertState(t, pools[0], migrationCount(t))
	assertSameCatalog(t, "up after a cancelled up", int64(migrationCount(t)), want, fingerprint(t, pools[0]))
}

// migratedDownTo takes pool's database, migrated to the latest, down to version from, for a test
// that migrates it again.
func migratedDownTo(t *testing.T, pool *pgxpool.Pool, from int64) {
	t.Helper()
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DownTo(context.Background(), from); err != nil {
		t.Fatalf("DownTo %d: %v", from, err)
	}
}
