package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// A Down of a migration that runs outside a transaction (00005, 00010:
// CREATE INDEX CONCURRENTLY) is recorded only after its last statement, so
// one interrupted at its last moment leaves the migration recorded as
// applied with its indexes dropped. The README's remedy: run the Down again
// to the end, then Migrate. The catalog is then the one of a database
// migrated straight up.
func TestDownAgainAfterAnInterruptedDownThenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t) // migrated to the latest version
	want := fingerprint(t, pool)
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	p, err := schema.NewProvider(sqlDB)
	if err != nil {
		t.Fatalf("provider: %v", err)
	}
	defer p.Close()
	store, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, interrupted := range []int64{10, 5} {
		if _, err := p.DownTo(ctx, interrupted-1); err != nil {
			t.Fatalf("down to %d: %v", interrupted-1, err)
		}
		// Every statement of its Down ran; the version row was not deleted yet.
		if err := store.Insert(ctx, sqlDB, database.InsertRequest{Version: interrupted}); err != nil {
			t.Fatalf("recording version %d again: %v", interrupted, err)
		}
		if _, err := p.DownTo(ctx, interrupted-1); err != nil {
			t.Fatalf("down to %d again, after an interrupted down of %05d: %v", interrupted-1, interrupted, err)
		}
		if err := schema.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate after the down of %05d ran again: %v", interrupted, err)
		}
		assertState(t, pool, migrationCount(t))
		assertSameCatalog(t, "up after a down run again", int64(migrationCount(t)), want, fingerprint(t, pool))
	}
}
