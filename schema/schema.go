// Package schema holds pgadmit's database migrations and applies them.
//
// The migrations are the goose SQL files of this directory, embedded in [FS]. They are applied
// through goose's Provider API only: this package never touches goose's process-wide globals
// (its global dialect, table name, logger or Go-migration registry), which belong to the service
// that imports pgadmit. pgadmit keeps its own version table, [VersionTable], so it never collides
// with the service's own goose history, and serializes concurrent migrators with its own
// session-level advisory lock, [LockID].
//
// A service migrates at start-up with the pgx pool it already has:
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	defer pool.Close()
//	if err := schema.Migrate(ctx, pool); err != nil {
//		return fmt.Errorf("migrate pgadmit: %w", err)
//	}
//
// Several instances may call [Migrate] at the same time: the advisory lock lets one apply the
// pending migrations while the others wait, then find nothing left to do.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the goose migrations (schema/NNNNN_description.sql), embedded at build time.
//
//go:embed *.sql
var FS embed.FS

const (
	// VersionTable is the goose version table in which pgadmit records its applied migrations.
	// It is not goose's default ("goose_db_version"), so that pgadmit's history never mixes with
	// the importing service's own goose migrations in the same database.
	VersionTable = "pgadmit_goose_version"

	// LockID is the key of the PostgreSQL session-level advisory lock (the single-bigint key
	// space of pg_advisory_lock) that serializes pgadmit migrations across processes. It is
	// FNV-1a-64 of "pgadmit.schema.migrate" with the sign bit cleared: far outside the int4
	// range, so it cannot collide with keys derived from hashtext(), nor with goose's default
	// lock id (4097083626), which the importing service's own migrations may hold.
	// Advisory locks are per database, so only migrators of the same database wait for it.
	LockID int64 = 6660047219960615361
)

// NewProvider returns a goose provider for pgadmit's migrations on db, configured with
// [VersionTable], the [LockID] session locker and goose's global registry disabled. db must use
// a PostgreSQL database/sql driver, such as pgx's "pgx" driver (github.com/jackc/pgx/v5/stdlib).
//
// opts are appended to pgadmit's own options, for instance goose.WithVerbose or goose.WithSlog
// for a CLI; options that set the table name, store or locker conflict with pgadmit's and make
// NewProvider fail.
//
// Closing the provider closes db.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(LockID),
		// Poll every second (goose's default is every 5 s) for up to 5 minutes, so instances
		// that start together do not each wait 5 s behind the first one.
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return nil, fmt.Errorf("schema: session locker: %w", err)
	}
	all := append([]goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	}, opts...)
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, all...)
	if err != nil {
		return nil, fmt.Errorf("schema: goose provider: %w", err)
	}
	return p, nil
}

// Migrate applies every pending pgadmit migration to the database of pool. It is the one call a
// service makes at start-up; it is safe to call from several processes at once, and a no-op when
// the schema is current. pool stays open.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return withProvider(pool, func(p *goose.Provider) error {
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("schema: migrate up: %w", err)
		}
		return nil
	})
}

// Down reverts every applied pgadmit migration (down to version 0), dropping pgadmit's tables
// and all their data. The version table itself stays. pool stays open.
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	return withProvider(pool, func(p *goose.Provider) error {
		if _, err := p.DownTo(ctx, 0); err != nil {
			return fmt.Errorf("schema: migrate down: %w", err)
		}
		return nil
	})
}

// Status reports every known pgadmit migration, in ascending version order, as applied (with the
// time it was) or pending. It creates the version table when it is missing. pool stays open.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	var out []*goose.MigrationStatus
	err := withProvider(pool, func(p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("schema: migration status: %w", err)
		}
		out = st
		return nil
	})
	return out, err
}

// Version returns the highest pgadmit migration version applied to the database of pool, 0 when
// none is. It creates the version table when it is missing. pool stays open.
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var v int64
	err := withProvider(pool, func(p *goose.Provider) error {
		got, err := p.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("schema: database version: %w", err)
		}
		v = got
		return nil
	})
	return v, err
}

// withProvider runs fn with a provider over a *sql.DB that borrows connections from pool, and
// closes that *sql.DB (not the pool) afterwards.
func withProvider(pool *pgxpool.Pool, fn func(*goose.Provider) error) (err error) {
	db := stdlib.OpenDBFromPool(pool)
	p, err := NewProvider(db)
	if err != nil {
		_ = db.Close()
		return err
	}
	defer func() {
		// Provider.Close closes db; the pool stays open.
		if cerr := p.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("schema: close: %w", cerr)
		}
	}()
	return fn(p)
}
