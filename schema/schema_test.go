package schema_test

import (
	"context"
	"io/fs"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// migrationCount returns how many migrations are embedded.
func migrationCount(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no migrations embedded")
	}
	return len(names)
}

// assertState checks that the first applied migrations are applied and the rest pending, and
// that the database version is the last applied one's.
func assertState(t *testing.T, pool *pgxpool.Pool, applied int) {
	t.Helper()
	ctx := context.Background()
	st, err := schema.Status(ctx, pool)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if len(st) != migrationCount(t) {
		t.Fatalf("status lists %d migrations, want %d", len(st), migrationCount(t))
	}
	var wantVersion int64
	for i, s := range st {
		want := goose.StatePending
		if i < applied {
			want = goose.StateApplied
			wantVersion = s.Source.Version
		}
		if s.State != want {
			t.Errorf("migration %s is %s, want %s", s.Source.Path, s.State, want)
		}
	}
	v, err := schema.Version(ctx, pool)
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if v != wantVersion {
		t.Errorf("version = %d, want %d", v, wantVersion)
	}
}

// emptyPool returns a pool on a fresh database with no pgadmit migration applied.
func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := schema.Down(context.Background(), pool); err != nil {
		t.Fatalf("down: %v", err)
	}
	assertState(t, pool, 0)
	return pool
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	n := migrationCount(t)

	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("up: %v", err)
	}
	assertState(t, pool, n)

	// Migrate again: nothing pending, nothing to do.
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("second up: %v", err)
	}
	assertState(t, pool, n)

	if err := schema.Down(ctx, pool); err != nil {
		t.Fatalf("down: %v", err)
	}
	assertState(t, pool, 0)

	// Down really reverses Up: applying it all again succeeds.
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	assertState(t, pool, n)
}

// TestEachMigrationReverses applies the migrations one at a time, and after each checks that
// its Down runs and that it then applies again.
func TestEachMigrationReverses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	db := stdlib.OpenDBFromPool(pool)
	p, err := schema.NewProvider(db)
	if err != nil {
		t.Fatalf("provider: %v", err)
	}
	defer p.Close()
	for i, src := range p.ListSources() {
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("up %s: %v", src.Path, err)
		}
		if _, err := p.Down(ctx); err != nil {
			t.Fatalf("down %s: %v", src.Path, err)
		}
		assertState(t, pool, i)
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("up %s again: %v", src.Path, err)
		}
		assertState(t, pool, i+1)
	}
}

// TestDownAfterAnInterruptedMigration goes down from where an interrupted
// 00010 Up leaves a database: 00010 is not transactional, so the index it
// replaces can be gone while the migration is still pending. The
// interruption is its last moment: every statement ran, the version was not
// recorded.
func TestDownAfterAnInterruptedMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
	if err != nil {
		t.Fatalf("provider: %v", err)
	}
	defer p.Close()
	const interrupted = 10 // 00010_prune_by_window_length.sql
	if _, err := p.UpTo(ctx, interrupted); err != nil {
		t.Fatalf("up to %d: %v", interrupted, err)
	}
	store, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, stdlib.OpenDBFromPool(pool), interrupted); err != nil {
		t.Fatalf("forgetting version %d: %v", interrupted, err)
	}
	assertState(t, pool, interrupted-1)
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down after an interrupted %05d: %v", interrupted, err)
	}
	assertState(t, pool, 0)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
	assertState(t, pool, migrationCount(t))
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4)
	if err := schema.Down(ctx, pools[0]); err != nil {
		t.Fatalf("down: %v", err)
	}
	// Several instances starting at once: the advisory lock lets one migrate, the others then
	// find nothing to do.
	errs := make(chan error, len(pools))
	for _, pool := range pools {
		go func() { errs <- schema.Migrate(ctx, pool) }()
	}
	for range pools {
		if err := <-errs; err != nil {
			t.Errorf("concurrent migrate: %v", err)
		}
	}
	assertState(t, pools[0], migrationCount(t))
}

func TestVersionTableName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	for _, tc := range []struct {
		table string
		want  bool
	}{
		{schema.VersionTable, true},
		{goose.DefaultTablename, false}, // goose's default belongs to the importing service
	} {
		store, err := database.NewStore(goose.DialectPostgres, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		ext, ok := store.(database.StoreExtender)
		if !ok {
			t.Fatalf("goose's postgres store %T cannot tell whether a table exists", store)
		}
		got, err := ext.TableExists(ctx, conn)
		if err != nil {
			t.Fatalf("table %s exists: %v", tc.table, err)
		}
		if got != tc.want {
			t.Errorf("table %s exists = %v, want %v", tc.table, got, tc.want)
		}
	}

	// The store reading the custom table sees the version the provider reports.
	store, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := store.GetLatestVersion(ctx, conn)
	if err != nil {
		t.Fatalf("latest version in %s: %v", schema.VersionTable, err)
	}
	v, err := schema.Version(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if latest != v || v == 0 {
		t.Errorf("latest version in %s = %d, provider says %d; want equal and > 0", schema.VersionTable, latest, v)
	}
}

func TestProviderIgnoresGooseGlobals(t *testing.T) {
	t.Parallel()
	// A service's globally registered Go migration must not leak into pgadmit's provider.
	// NewProvider fails on an embedded FS without migrations, so ListSources is the check.
	db := stdlib.OpenDBFromPool(pgtest.NewPool(t))
	p, err := schema.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, want := len(p.ListSources()), migrationCount(t); got != want {
		t.Fatalf("provider lists %d sources, want the %d embedded migrations", got, want)
	}
}
