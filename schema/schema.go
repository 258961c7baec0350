// Package schema holds pgadmit's database migrations and applies them.
//
// The migrations are the goose SQL files of this directory, embedded in [FS]. They are applied
// through goose's Provider API only: this package never touches goose's process-wide globals
// (its global dialect, table name, logger or Go-migration registry), which belong to the service
// that imports pgadmit. pgadmit keeps its own version table, [VersionTable], so it never collides
// with the service's own goose history, and serializes concurrent migrators with a lock row in its
// own lock table, [LockTable] (goose's table locker): no session state, so migrating works the
// same through a transaction-pooling proxy such as PgBouncer, and a migrator that dies leaves a
// lease that lapses instead of a lock held by a pooled server connection.
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
// Several instances may call [Migrate] at the same time: the lock row lets one apply the pending
// migrations while the others wait, then find nothing left to do. Every transactional migration
// from 00004 on sets lock_timeout for its own transaction, so a migration that would queue behind
// a long transaction (and every admission behind it) fails fast instead, with nothing applied.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/ratelimit"
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

	// LockTable is the table of goose's table locker in which pgadmit's migrators take their
	// lock row (goose creates it on first use). It is not goose's default ("goose_lock"), so
	// that pgadmit's migrations never wait for the service's own, nor the reverse.
	LockTable = "pgadmit_goose_lock"

	// LockID is the id of pgadmit's lock row in [LockTable]: FNV-1a-64 of
	// "pgadmit.schema.migrate" with the sign bit cleared.
	LockID int64 = 6660047219960615361

	// LockLease is how long a migrator's lock row holds without a heartbeat (goose renews it
	// every LockLease/6 while migrations run): a migrator that dies blocks the others this long.
	LockLease = 30 * time.Second
)

// NewProvider returns a goose provider for pgadmit's migrations on db, configured with
// [VersionTable], goose's table locker on [LockTable] and goose's global registry disabled. db
// must use a PostgreSQL database/sql driver, such as pgx's "pgx" driver
// (github.com/jackc/pgx/v5/stdlib).
//
// The locker waits for another migrator's lock row for as long as the context allows (and at
// most 5 minutes), trying again every second, also after a lost connection or a connection
// attempt that timed out (the database unreachable for a while), and gives its own up within 5
// seconds, also when the context is done. A role the server refuses the lock table to (one that
// may not migrate, as the roles of docs/privileges.sql) fails at once, with the server's error
// (insufficient_privilege, SQLSTATE 42501), and so does a session that may not write at all (a
// hot standby, or default_transaction_read_only on: read_only_sql_transaction, SQLSTATE 25006).
//
// opts are appended to pgadmit's own options, for instance goose.WithVerbose or goose.WithSlog
// for a CLI (a nil one sets nothing); options that set the table name, store or locker conflict
// with pgadmit's and make NewProvider fail. An option that goose refuses, for such a conflict or
// any other reason (a nil logger), is a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput) on its place in opts ("opts[0]"), whose Value names the option
// ("goose.WithTableName"), and which wraps goose's error.
//
// Closing the provider closes db. A nil db is a *ratelimit.ValidationError on "db", as a nil
// pool is for Migrate, and so is a db limited to one open connection (db.SetMaxOpenConns(1)):
// goose holds one for the migrations while its locker takes the lock row on another, so a
// migration would wait for a second one forever.
//
// goose's steps (Up, Down...) take the connection they migrate on before they wait for another
// migrator's lock row, and hold it idle through the wait: one that the server ended meanwhile
// (it restarted) fails the step once the row is free. [Migrate], [Down] and [Locked] wait for
// the row first.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	p, _, err := newProvider(db, opts)
	return p, err
}

// newProvider is NewProvider, which also returns the provider's locker.
func newProvider(db *sql.DB, opts []goose.ProviderOption) (*goose.Provider, *tableLocker, error) {
	if db == nil {
		return nil, nil, errNilDB
	}
	if maxOpen := db.Stats().MaxOpenConnections; maxOpen == 1 {
		return nil, nil, errOneConnDB(maxOpen)
	}
	locker := &tableLocker{}
	var err error
	locker.Locker, err = lock.NewPostgresTableLocker(
		lock.WithTableName(LockTable),
		lock.WithTableLockID(LockID),
		lock.WithTableLeaseDuration(LockLease),
		lock.WithTableHeartbeatInterval(LockLease/6),
		// Try every second (goose's default is every 5 s) for up to 5 minutes, or until the
		// context ends, so instances that start together do not each wait 5 s behind the first.
		lock.WithTableLockTimeout(time.Second, 300),
		// Give the lock up within 5 s (goose's default retries for a minute).
		lock.WithTableUnlockTimeout(200*time.Millisecond, 25),
		lock.WithTableRetryPolicy(locker.retry),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: table locker: %w", err)
	}
	// The version table is given as a store, not with goose.WithTableName: goose lets a later
	// WithTableName silently replace an earlier one (pgadmit's history would then go into the
	// service's own table), but refuses a WithTableName or a second WithStore next to a store.
	// The store is goose's own PostgreSQL store; DialectCustom only says it is supplied.
	store, err := database.NewStore(goose.DialectPostgres, VersionTable)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: version table store: %w", err)
	}
	own := []goose.ProviderOption{
		goose.WithStore(store),
		goose.WithLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, FS, slices.Concat(own, setOptions(opts))...)
	if err != nil {
		return nil, nil, refusal(db, own, opts, err)
	}
	return p, locker, nil
}

// setOptions is opts without the nil ones: a nil option (one left unset)
// sets nothing, as everywhere in pgadmit, where goose would call it.
func setOptions(opts []goose.ProviderOption) []goose.ProviderOption {
	return slices.DeleteFunc(slices.Clone(opts), func(o goose.ProviderOption) bool { return o == nil })
}

// tableLocker is goose's table locker, which knows whether it is taking the lock row or giving
// it up, for its retry policy, and can take the row ahead of goose.
type tableLocker struct {
	lock.Locker
	releasing atomic.Bool
	// ahead: lockAhead took the lock row, which goose's next Lock keeps instead of taking it.
	ahead atomic.Bool
}

// Lock takes the lock row, or keeps the one lockAhead took.
func (l *tableLocker) Lock(ctx context.Context, db *sql.DB) error {
	if l.ahead.Swap(false) {
		return nil
	}
	return l.Locker.Lock(ctx, db)
}

// lockAhead takes the lock row for goose's next Lock, before goose takes its connection.
func (l *tableLocker) lockAhead(ctx context.Context, db *sql.DB) error {
	if err := l.Locker.Lock(ctx, db); err != nil {
		return err
	}
	l.ahead.Store(true)
	return nil
}

// dropAhead gives up the row lockAhead took when goose did not take it over (its step found
// nothing to do, or failed before it locked).
func (l *tableLocker) dropAhead(ctx context.Context, db *sql.DB) error {
	if !l.ahead.Swap(false) {
		return nil
	}
	return l.Unlock(ctx, db)
}

// Unlock gives the lock row up.
func (l *tableLocker) Unlock(ctx context.Context, db *sql.DB) error {
	l.releasing.Store(true)
	defer l.releasing.Store(false)
	return l.Locker.Unlock(ctx, db)
}

// retry tells goose's table locker which failures are worth another try: a lock row another
// migrator holds, a transient database error, and, while it takes the lock row, a connection
// attempt that timed out (the database unreachable for a while, as when it restarts; goose stops
// trying once the context ends). A context that ended, or a lock row that another migrator took
// over after this one's lease lapsed ("not held by this instance"; goose's store has no error
// value for it), will not get better; nor is a connect timeout tried again while it gives the
// lock row up, which goose does without the context's deadline: the lease lapses instead. Nor
// will the server's refusal of the role (SQLSTATE class 42, as insufficient_privilege on the lock
// table for a role that may not migrate, or class 28), nor of the write itself on a session that
// may only read (25006, read_only_sql_transaction: a hot standby, or default_transaction_read_only
// on): tried again, it held such a migrator for 5 minutes, said to wait for another migrator's
// lock row, and then reported only that it could not take the lock.
func (l *tableLocker) retry(err error) bool {
	switch {
	case strings.Contains(err.Error(), "not held by this instance"), refused(err):
		return false
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return !l.releasing.Load() && connectTimedOut(err)
	}
	return true
}

// refused reports whether err is the server refusing the statement for what it is or who runs
// it (SQLSTATE class 42, syntax error or access rule violation, or class 28, invalid
// authorization), or a write in a session that may only read (25006, read_only_sql_transaction),
// which no wait changes.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(strings.HasPrefix(pgErr.Code, "42") || strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "25006")
}

// connectTimedOut reports whether err is a connection attempt that gave up at its connect
// timeout (pgx reports it as the context's deadline).
func connectTimedOut(err error) bool {
	var connect *pgconn.ConnectError
	return errors.As(err, &connect) && pgconn.Timeout(err)
}

// Migrate applies every pending pgadmit migration to the database of pool. It is the one call a
// service makes at start-up; it is safe to call from several processes at once, and a no-op when
// the schema is current. pool stays open. A nil pool is a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput), for Down, Locked, Status and Version too, and so is a nil ctx (on
// "ctx").
//
// Through a proxy that pools by statement (PgBouncer with pool_mode = statement), which runs no
// transaction block, it stops at the first pending migration that runs in a transaction (most
// do), with nothing of it applied, and returns an error matching ratelimit.ErrStatementPooling
// (errors.Is) that says what to change; pending migrations before it that run outside a
// transaction are applied. On a database without the version table (which goose creates in a
// transaction) it returns that error before anything is created. Down reports such a failure
// the same way (Status only reads, and works through such a proxy).
//
// pool must allow at least 2 connections (one for the migrations, one for the lock row): a pool
// of one is a *ratelimit.ValidationError, for Down and Locked too.
//
// It takes the migration lock only when a migration is pending (instances that start on a
// current schema do not wait for each other), and waits for it before goose takes the
// connection it migrates on (see NewProvider).
//
// On a database that a newer pgadmit migrated (a version above the last migration of [FS], as
// while a release is rolled back), it applies nothing and returns nil: [Version] says the newer
// version, [Status] lists this package's migrations only, and [Down] reverts nothing and fails
// with goose.ErrVersionNotFound (revert with the pgadmit that applied it).
//
// One whose ctx ends in a migration returns goose's *goose.PartialError (errors.As), which
// names that migration and lists those applied before it. One whose ctx ends once every pending
// migration was applied (the schema current; goose then reads the version it reached) returns a
// [*CompletedError], which lists them all and matches the context's error (errors.Is
// context.Canceled or context.DeadlineExceeded).
//
// Whenever its ctx ends (before the lock row is taken, while it waits for another migrator's, in
// a migration's statement or right before its commit, between two migrations, after the last),
// its error matches the context's (errors.Is context.Canceled or context.DeadlineExceeded),
// also where goose's or database/sql's own error does not name it (a migration whose transaction
// database/sql rolled back as the context ended: "transaction has already been committed or
// rolled back"): a service that migrates at start-up under a deadline tells "ran out of time"
// from a migration that failed by it. The *goose.PartialError or [*CompletedError] is still
// found with errors.As. Down and Locked do the same.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	pending := func(p *goose.Provider) (bool, error) { return p.HasPending(ctx) }
	err := completing(ctx, pool, pending, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
	if err != nil && !errors.Is(err, ratelimit.ErrInvalidInput) {
		return fmt.Errorf("schema: migrate up: %w", err)
	}
	return err
}

// Down reverts every applied pgadmit migration (down to version 0), dropping pgadmit's tables
// and all their data. The version table itself stays. pool stays open. Its errors are as
// Migrate's: one whose ctx ended once every migration was reverted is a [*CompletedError].
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	err := completing(ctx, pool, nil, func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, 0)
		return err
	})
	if err != nil && !errors.Is(err, ratelimit.ErrInvalidInput) {
		return fmt.Errorf("schema: migrate down: %w", err)
	}
	return err
}

// Locked runs step with a provider of pgadmit's migrations over pool, as NewProvider makes one
// with opts, once it holds the migration lock row, waiting for it as the provider's locker
// would. The first of goose's steps in step that locks (Up, UpTo, Down, DownTo...) keeps that
// row instead of waiting for it, so it takes the connection it migrates on only then (see
// NewProvider); Locked gives the row up when step returns, if goose did not. A nil step is a
// *ratelimit.ValidationError on "step", returned before the row is taken. It is what
// `pgadmit migrate` runs. It returns step's error, or the lock's; one that a statement-pooling
// proxy caused matches ratelimit.ErrStatementPooling, as Migrate's does, and one returned once
// ctx ended matches the context's error, as Migrate's does. pool stays open.
func Locked(ctx context.Context, pool *pgxpool.Pool, step func(*goose.Provider) error, opts ...goose.ProviderOption) error {
	return withLock(ctx, pool, opts, nil, step)
}

// Status reports every known pgadmit migration (those of [FS]; not one that a newer pgadmit
// applied, which [Version] reports), in ascending version order, as applied (with the time it
// was) or pending. It only reads the version table, without the migration lock, so it
// answers at once while another process migrates, and it creates nothing: on a database without
// the table every migration is pending. pool stays open.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	if err := nilArgument(ctx, pool); err != nil {
		return nil, err
	}
	var sources []*goose.Source
	if err := withProvider(pool, nil, func(p *goose.Provider, _ *sql.DB, _ *tableLocker) error {
		sources = p.ListSources()
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]*goose.MigrationStatus, len(sources))
	for i, s := range sources {
		out[i] = &goose.MigrationStatus{Source: s, State: goose.StatePending}
	}
	err := readVersionTable(ctx, pool, func(conn *sql.Conn, store database.Store) error {
		for _, st := range out {
			applied, err := store.GetMigration(ctx, conn, st.Source.Version)
			if errors.Is(err, database.ErrVersionNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			st.State, st.AppliedAt = goose.StateApplied, applied.Timestamp
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schema: migration status: %w", err)
	}
	return out, nil
}

// Version returns the highest pgadmit migration version applied to the database of pool, 0 when
// none is (or the version table is not in the session's current schema: it does not exist yet,
// the search_path leads elsewhere, or the session has no current schema). It reads the version table without taking
// the migration lock, so it answers at once while another process migrates. pool stays open.
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	if err := nilArgument(ctx, pool); err != nil {
		return 0, err
	}
	var v int64
	err := readVersionTable(ctx, pool, func(conn *sql.Conn, store database.Store) error {
		latest, err := store.GetLatestVersion(ctx, conn)
		if errors.Is(err, database.ErrVersionNotFound) {
			return nil
		}
		v = latest
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("schema: database version: %w", err)
	}
	return v, nil
}

// readVersionTable runs fn with a connection of pool and goose's store of [VersionTable], when
// the table is in the session's current schema (it does not call fn when it is not, nor when
// the session has no current schema): reads that take no lock and create nothing. goose's own
// check (TableExists) counts the table in any schema when the session has no current schema (a
// role whose search_path is a schema it has no USAGE on), which the session then cannot read.
func readVersionTable(ctx context.Context, pool *pgxpool.Pool, fn func(*sql.Conn, database.Store) error) error {
	present, err := db.New().VersionTableInCurrentSchema(ctx, pool, VersionTable)
	if err != nil || !present {
		return err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	store, err := database.NewStore(goose.DialectPostgres, VersionTable)
	if err != nil {
		return err
	}
	return fn(conn, store)
}

// errNilPool is what Migrate, Down, Status and Version return for a nil
// pool (pgxpool.New's result when its error went unchecked), which pgx
// would dereference: bad input, as pgadmit reports it everywhere.
var errNilPool = oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "pool", Reason: "must be a pool, not nil"})

// errNilContext is what Migrate, Down, Locked, Status and Version return
// for a nil ctx, which database/sql would dereference (holding a lock that
// the provider's Close then waits for, for ever).
var errNilContext = oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "ctx",
	Reason: "must be a context, not nil (context.Background() when there is none)"})

// nilArgument is Status's and Version's error for a nil pool or ctx (nil
// when neither is); Migrate, Down and Locked check the pool further
// (migratingPool).
func nilArgument(ctx context.Context, pool *pgxpool.Pool) error {
	switch {
	case pool == nil:
		return errNilPool
	case ctx == nil:
		return errNilContext
	}
	return nil
}

// errNilStep is Locked's for a nil step, refused before the lock row is taken.
var errNilStep = oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "step", Reason: "must be a function, not nil"})

var errNilDB = oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "db", Reason: "must be a *sql.DB, not nil"})

// Migrating holds a connection for the migrations while the locker takes the lock row on
// another: with one, it would wait for the second forever. The refusal's Value is the bound it
// found, which the message shows: without one it read "invalid pool (<nil>)", as of a nil pool.
func errOneConnPool(maxConns int32) error {
	return oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "pool", Value: fmt.Sprintf("MaxConns %d", maxConns),
		Reason: "must allow at least 2 connections: migrating holds one while it takes the lock row on another"})
}

func errOneConnDB(maxOpen int) error {
	return oneprefix.Errorf("schema: %w", &ratelimit.ValidationError{Field: "db", Value: fmt.Sprintf("MaxOpenConns %d", maxOpen),
		Reason: "must allow at least 2 open connections: migrating holds one while it takes the lock row on another"})
}

// migratingPool refuses a pool that cannot migrate: nil, or of one connection.
func migratingPool(pool *pgxpool.Pool) error {
	switch {
	case pool == nil:
		return errNilPool
	case pool.Config().MaxConns < 2:
		return errOneConnPool(pool.Config().MaxConns)
	}
	return nil
}

// withProvider runs fn with a provider (with opts) over a *sql.DB that borrows connections
// from pool, that *sql.DB and the provider's locker, and closes that *sql.DB (not the pool)
// afterwards.
func withProvider(pool *pgxpool.Pool, opts []goose.ProviderOption, fn func(*goose.Provider, *sql.DB, *tableLocker) error) (err error) {
	if pool == nil {
		return errNilPool
	}
	db := stdlib.OpenDBFromPool(pool)
	p, locker, err := newProvider(db, opts)
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
	return poolerr.Wrap(fn(p, db, locker), poolerr.MigrationsNeed)
}

// withLock runs step with a provider over pool (with opts) once it holds the migration lock
// row, which it takes before goose takes its connection (see NewProvider), and gives up after
// step unless goose took it over. When pending (read without the lock) reports nothing to do,
// it runs nothing and takes no lock.
func withLock(ctx context.Context, pool *pgxpool.Pool, opts []goose.ProviderOption,
	pending func(*goose.Provider) (bool, error), step func(*goose.Provider) error) error {
	switch err := migratingPool(pool); {
	case err != nil:
		return err
	case ctx == nil:
		return errNilContext
	case step == nil:
		return errNilStep
	}
	err := withProvider(pool, opts, func(p *goose.Provider, db *sql.DB, locker *tableLocker) (err error) {
		if err := transactionsRunBeforeGoose(ctx, pool); err != nil {
			return err
		}
		if pending != nil {
			if todo, err := pending(p); err != nil || !todo {
				return err
			}
		}
		if err := locker.lockAhead(ctx, db); err != nil {
			return err
		}
		defer func() {
			// Also once ctx ended, as goose gives its lock up.
			if derr := locker.dropAhead(context.WithoutCancel(ctx), db); derr != nil && err == nil {
				err = derr
			}
		}()
		return step(p)
	})
	return namingEndedContext(ctx, err)
}

// namingEndedContext returns err, made to match ctx's error too (errors.Is) when ctx has ended
// and err does not already: database/sql rolls back a transaction whose context ended, and a
// goose migration whose context ended between its last statement and its commit then fails with
// sql.ErrTxDone ("transaction has already been committed or rolled back"), which does not name
// the context. err stays whole (errors.As finds a *goose.PartialError in it as before).
func namingEndedContext(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (the context had ended: %w)", err, ctx.Err())
}
