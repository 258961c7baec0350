package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgadmit/pgadmit/schema"
)

// AnotherMigrator holds pgadmit's migration lock row on url, as another migrator (another
// `pgadmit migrate`, another process's schema.Migrate) would, on a pool of its own, its
// heartbeat running until ctx ends; unlock gives the row up. The pool is closed at t's end.
func AnotherMigrator(t testing.TB, ctx context.Context, url string) (pool *pgxpool.Pool, unlock func() error) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { sqlDB.Close() })
	other, err := lock.NewPostgresTableLocker(lock.WithTableName(schema.LockTable), lock.WithTableLockID(schema.LockID))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Lock(ctx, sqlDB); err != nil {
		t.Fatal(err)
	}
	return pool, func() error { return other.Unlock(context.Background(), sqlDB) }
}

// RecordNewerMigration records migration version in pool's version table, through goose's own
// store, as a newer pgadmit that embeds it would have applied it.
func RecordNewerMigration(t testing.TB, pool *pgxpool.Pool, version int64) {
	t.Helper()
	store, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	if err := store.Insert(context.Background(), sqlDB, database.InsertRequest{Version: version}); err != nil {
		t.Fatal(err)
	}
}
