package schema_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// Migrate, Down and Locked whose context ends, whenever it does (before they take the lock
// row, while they read what is pending or wait for another migrator's lock row, inside a
// migration's statement, between two migrations, after the last), return an error that matches
// the context's (errors.Is context.Canceled, or context.DeadlineExceeded for a deadline), and
// says so: a service migrating at start-up under a deadline tells "ran out of time" from
// "migration broken" by it. goose's *goose.PartialError and pgadmit's *schema.CompletedError
// are still found (errors.As) where they apply.
func TestAnEndedContextShowsInTheError(t *testing.T) {
	t.Parallel()
	n := int64(migrationCount(t))
	migrate := schema.Migrate
	locked := func(ctx context.Context, pool *pgxpool.Pool) error {
		return schema.Locked(ctx, pool, func(p *goose.Provider) error {
			_, err := p.Up(ctx)
			return err
		})
	}
	for _, m := range []struct {
		name string
		from int64 // the version the database starts at
		run  func(context.Context, *pgxpool.Pool) error
		// arrange prepares the moment on the database of url (setup is a pool on it) and
		// returns the tracer of the migrator's pool, or nil, and what to do while the migrator
		// runs, or nil; end ends the migrator's context.
		arrange   func(t *testing.T, url string, setup *pgxpool.Pool, end func()) (pgx.QueryTracer, func())
		partial   bool  // a *goose.PartialError is found
		failed    int64 // the migration it names as failed
		completed bool  // a *schema.CompletedError is found
	}{
		{name: "Migrate ended before the call", from: n - 2, run: migrate, arrange: endedBefore},
		{name: "Migrate while it reads what is pending", from: n - 2, run: migrate, arrange: blockedOn("the read of the versions", dbtest.New().OpsLockVersionTable)},
		{name: "Migrate waiting for another migrator's lock row", from: n - 2, run: migrate, arrange: behindAnotherMigrator},
		{name: "Migrate inside a migration's statement (no transaction)", from: concurrentIndexVersion - 1, run: migrate,
			arrange: blockedOn("00005's concurrent index build", func(ctx context.Context, tx dbtest.DBTX) error {
				_, err := dbtest.New().OpsReservationCorruptFinalized(ctx, tx, pgtype.UUID{Valid: true})
				return err
			}), partial: true, failed: concurrentIndexVersion},
		{name: "Migrate inside a migration's statement (in a transaction)", from: commentsVersion - 1, run: migrate,
			arrange: blockedOn("00023's COMMENT ON the counters", dbtest.New().OpsLockCounters), partial: true, failed: commentsVersion},
		{name: "Migrate right before a migration's commit", from: commentsVersion - 1, run: migrate, arrange: beforeCommitOf(commentsVersion), partial: true, failed: commentsVersion},
		{name: "Migrate between two migrations", from: n - 2, run: migrate, arrange: afterVersion(n - 1), partial: true, failed: n},
		{name: "Migrate after its last migration", from: n - 2, run: migrate, arrange: afterVersion(n), completed: true},
		{name: "Down ended before the call", from: 2, run: schema.Down, arrange: endedBefore},
		{name: "Down waiting for another migrator's lock row", from: 2, run: schema.Down, arrange: behindAnotherMigrator},
		{name: "Down right before a migration's commit", from: 2, run: schema.Down, arrange: beforeCommitOf(2), partial: true, failed: 2},
		{name: "Down between two migrations", from: 2, run: schema.Down, arrange: afterVersion(2), partial: true, failed: 1},
		{name: "Locked ended before the call", from: n - 2, run: locked, arrange: endedBefore},
		{name: "Locked waiting for another migrator's lock row", from: n - 2, run: locked, arrange: behindAnotherMigrator},
		{name: "Locked right before a migration's commit", from: commentsVersion - 1, run: locked, arrange: beforeCommitOf(commentsVersion), partial: true, failed: commentsVersion},
		{name: "Locked between two migrations", from: n - 2, run: locked, arrange: afterVersion(n - 1), partial: true, failed: n},
	} {
		for _, want := range []error{context.Canceled, context.DeadlineExceeded} {
			t.Run(m.name+"/"+want.Error(), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				url := pgtest.NewURL(t)
				setup := pgtest.OpenPool(t, url)
				migratedDownTo(t, setup, m.from)

				mctx := newEndingContext(want)
				tracer, meanwhile := m.arrange(t, url, setup, mctx.end)
				cfg, err := pgxpool.ParseConfig(url)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ConnConfig.Tracer = tracer
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()

				done := make(chan error, 1)
				go func() { done <- m.run(mctx, pool) }()
				if meanwhile != nil {
					meanwhile()
				}
				err = <-done
				if mctx.Err() == nil {
					t.Fatalf("%s returned %v before its context ended", m.name, err)
				}
				if !errors.Is(err, want) {
					t.Errorf("%s = %v (%T), want errors.Is %v", m.name, err, err, want)
				}
				if err != nil && !strings.Contains(err.Error(), want.Error()) {
					t.Errorf("%s: error %q does not say %q", m.name, err, want)
				}
				var partial *goose.PartialError
				if got := errors.As(err, &partial); got != m.partial {
					t.Errorf("%s: errors.As *goose.PartialError = %t, want %t (%v)", m.name, got, m.partial, err)
				} else if got && partial.Failed.Source.Version != m.failed {
					t.Errorf("%s: PartialError names %d failed, want %d", m.name, partial.Failed.Source.Version, m.failed)
				}
				var completed *schema.CompletedError
				if got := errors.As(err, &completed); got != m.completed {
					t.Errorf("%s: errors.As *schema.CompletedError = %t, want %t (%v)", m.name, got, m.completed, err)
				}
			})
		}
	}
}

// beforeCommitOf ends the context once the statement recording version, in its migration's
// transaction, is done, and lets database/sql's watch of the transaction's context (which rolls
// the transaction back) run before goose commits: the transaction is then done, and database/sql
// says so (sql.ErrTxDone) instead of naming the context.
func beforeCommitOf(version int64) func(*testing.T, string, *pgxpool.Pool, func()) (pgx.QueryTracer, func()) {
	return func(t *testing.T, _ string, _ *pgxpool.Pool, end func()) (pgx.QueryTracer, func()) {
		tr := &endBeforeCommit{version: version, end: end}
		t.Cleanup(func() {
			if !tr.rolledBack.Load() {
				t.Errorf("database/sql never rolled the transaction of %d back before its commit", version)
			}
		})
		return tr, nil
	}
}

// endBeforeCommit is a pgx tracer that ends the context at the end of the statement recording
// version inside its transaction, and returns (to goose, which commits next) only once
// database/sql's watch of the transaction's context has marked the transaction done and waits
// for the statement to be released.
type endBeforeCommit struct {
	version    int64
	end        func()
	rolledBack atomic.Bool
}

func (e *endBeforeCommit) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, versionStatementKey{}, recordsVersion(data, e.version))
}

func (e *endBeforeCommit) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil || ctx.Value(versionStatementKey{}) != true || conn.PgConn().TxStatus() != 'T' {
		return
	}
	e.end()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if rollbackWaiting() {
			e.rolledBack.Store(true)
			return
		}
	}
}

// rollbackWaiting reports whether a goroutine of database/sql's watch of a transaction's context
// is rolling it back, past marking it done, waiting for its statement to be released.
func rollbackWaiting() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "database/sql.(*Tx).awaitDone") && strings.Contains(g, "sync.(*RWMutex).Lock") {
			return true
		}
	}
	return false
}

// endingContext is a context that ends when end is called, with err as its error: a deadline
// that passes at a moment the test chooses, or a cancel.
type endingContext struct {
	context.Context
	err   error
	done  chan struct{}
	once  sync.Once
	ended atomic.Bool
}

func newEndingContext(err error) *endingContext {
	return &endingContext{Context: context.Background(), err: err, done: make(chan struct{})}
}

func (c *endingContext) end() {
	c.once.Do(func() {
		c.ended.Store(true)
		close(c.done)
	})
}

func (c *endingContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *endingContext) Done() <-chan struct{}       { return c.done }

func (c *endingContext) Err() error {
	if c.ended.Load() {
		return c.err
	}
	return nil
}

// endedBefore ends the context before the migrator runs.
func endedBefore(_ *testing.T, _ string, _ *pgxpool.Pool, end func()) (pgx.QueryTracer, func()) {
	end()
	return nil, nil
}

// afterVersion ends the context once the statement recording (or deleting) version is done.
func afterVersion(version int64) func(*testing.T, string, *pgxpool.Pool, func()) (pgx.QueryTracer, func()) {
	return func(_ *testing.T, _ string, _ *pgxpool.Pool, end func()) (pgx.QueryTracer, func()) {
		return &cancelAfterVersion{version: version, cancel: end}, nil
	}
}

// blockedOn holds lock (run in a transaction of its own) while the migrator runs, and ends the
// context once the migrator waits for it (what says which of its statements does).
func blockedOn(what string, lock func(context.Context, dbtest.DBTX) error) func(*testing.T, string, *pgxpool.Pool, func()) (pgx.QueryTracer, func()) {
	return func(t *testing.T, _ string, setup *pgxpool.Pool, end func()) (pgx.QueryTracer, func()) {
		ctx := context.Background()
		tx, err := setup.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if err := lock(ctx, tx); err != nil {
			t.Fatalf("lock for %s: %v", what, err)
		}
		return nil, func() {
			pgtest.AwaitLockWaiters(t, setup, what)
			end()
		}
	}
}

// behindAnotherMigrator has another migrator hold the lock row, and ends the context once the
// migrator's first try to take it failed.
func behindAnotherMigrator(t *testing.T, url string, _ *pgxpool.Pool, end func()) (pgx.QueryTracer, func()) {
	_, unlock := pgtest.AnotherMigrator(t, context.Background(), url)
	t.Cleanup(func() { _ = unlock() })
	return &endAfterLockTry{end: end}, nil
}

// endAfterLockTry is a pgx tracer that ends the context after the first try to take the lock
// row (goose's insert of it, ON CONFLICT (lock_id) taking a free or lapsed one).
type endAfterLockTry struct{ end func() }

type lockTryKey struct{}

func (e *endAfterLockTry) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, lockTryKey{}, strings.Contains(data.SQL, schema.LockTable) && strings.Contains(data.SQL, "ON CONFLICT (lock_id)"))
}

func (e *endAfterLockTry) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(lockTryKey{}) == true {
		e.end()
	}
}
