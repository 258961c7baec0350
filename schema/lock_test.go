package schema_test

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// firstLockTimeoutVersion is the first migration written after lock_timeout became the rule.
const firstLockTimeoutVersion = 4

// concurrentIndexVersion is the migration that builds indexes of the ledgers concurrently.
const concurrentIndexVersion = 5

// commentsVersion is a migration in a transaction that takes a lock on the counters (its
// COMMENT ON them), named rather than taken as the last: a later migration may run without a
// transaction (an index built CONCURRENTLY), and then the tests that stop one inside its
// transaction would find none.
const commentsVersion = 23

// Every transactional migration from firstLockTimeoutVersion on starts its Up and its Down with
// SET LOCAL lock_timeout, so that an ALTER queued behind a long transaction (and every admission
// queued behind the ALTER) fails fast instead of stalling the service.
func TestMigrationsSetLockTimeout(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range names {
		version, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			t.Fatalf("%s: no version: %v", name, err)
		}
		b, err := fs.ReadFile(schema.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if version < firstLockTimeoutVersion || strings.Contains(text, "-- +goose NO TRANSACTION") {
			continue
		}
		checked++
		for _, section := range []string{"-- +goose Up", "-- +goose Down"} {
			if first := firstStatementAfter(text, section); !strings.HasPrefix(first, "SET LOCAL lock_timeout = ") {
				t.Errorf("%s: %s begins with %q, want SET LOCAL lock_timeout", name, section, first)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no transactional migration checked")
	}
}

// firstStatementAfter returns the first line after the annotation that is neither blank nor a
// comment.
func firstStatementAfter(text, annotation string) string {
	_, rest, ok := strings.Cut(text, annotation+"\n")
	if !ok {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(rest))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "--") {
			return line
		}
	}
	return ""
}

// A migration that needs a lock another transaction holds gives up after its lock_timeout (5 s)
// with SQLSTATE 55P03 instead of queueing; nothing of it is applied, and it applies once the
// other transaction is gone.
func TestMigrationGivesUpBehindALongTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools := pgtest.NewPools(t, 2)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pools[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The migrations after 00004 first (00005 builds its indexes concurrently, which waits for
	// every open transaction instead).
	if _, err := p.DownTo(ctx, firstLockTimeoutVersion); err != nil {
		t.Fatalf("DownTo(%d): %v", firstLockTimeoutVersion, err)
	}

	// A long transaction of the service has read the table migration 00004 drops.
	tx, err := pools[1].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := db.New().MaintenanceCursorGet(ctx, tx, "x"); err != nil {
		t.Fatalf("MaintenanceCursorGet: %v", err)
	}
	start := time.Now()
	_, err = p.DownTo(ctx, firstLockTimeoutVersion-1)
	took := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("DownTo(%d) = %v, want lock_not_available (55P03)", firstLockTimeoutVersion-1, err)
	}
	if took < 4*time.Second || took > 20*time.Second {
		t.Fatalf("gave up after %s, want about 5 s", took)
	}
	if v, err := schema.Version(ctx, pools[0]); err != nil || v != firstLockTimeoutVersion {
		t.Fatalf("version = %d, %v; want %d: the failed migration applied nothing", v, err, firstLockTimeoutVersion)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, firstLockTimeoutVersion-1); err != nil {
		t.Fatalf("DownTo once the transaction ended: %v", err)
	}
	if err := schema.Migrate(ctx, pools[0]); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

// A migrator waiting for another one's lock row gives up when its context ends, at once, with
// the context's error; reading the version or the status meanwhile does not wait at all; and the first
// migrator finishes once what blocked it is gone, leaving the lock free.
func TestMigrateHonoursItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools := pgtest.NewPools(t, 3)
	before := int64(concurrentIndexVersion - 1)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pools[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, before); err != nil {
		t.Fatalf("DownTo: %v", err)
	}
	_ = p.Close()

	// A transaction that wrote to the reservations ledger keeps migration 00005's
	// CREATE INDEX CONCURRENTLY waiting, and with it the first migrator, which holds the lock.
	tx, err := pools[2].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := dbtest.New().OpsReservationCorruptFinalized(ctx, tx, pgtype.UUID{Valid: true}); err != nil {
		t.Fatalf("write in the blocking transaction: %v", err)
	}
	first := make(chan error, 1)
	go func() { first <- schema.Migrate(ctx, pools[0]) }()
	// The first migrator holds pgadmit's lock row and is blocked in a statement (the CREATE
	// INDEX CONCURRENTLY waiting for the test's transaction).
	pgtest.AwaitLockWaiters(t, pools[2], "the first migrator")

	deadline, cancel1 := context.WithTimeout(ctx, time.Second)
	defer cancel1()
	start := time.Now()
	err = schema.Migrate(deadline, pools[1])
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 2500*time.Millisecond {
		t.Fatalf("Migrate with a 1 s deadline = %v after %s, want the deadline's error within about 1 s", err, took)
	}
	vctx, vcancel := context.WithTimeout(ctx, time.Second)
	defer vcancel()
	if v, err := schema.Version(vctx, pools[1]); err != nil || v != before {
		t.Fatalf("Version while a migration runs = %d, %v; want %d at once", v, err, before)
	}
	st, err := schema.Status(vctx, pools[1])
	if err != nil {
		t.Fatalf("Status while a migration runs: %v; want it at once", err)
	}
	for _, s := range st {
		if applied := s.State == goose.StateApplied; applied != (s.Source.Version <= before) || applied == s.AppliedAt.IsZero() {
			t.Errorf("Status while a migration runs: %d %s (applied at %v); want versions up to %d applied, with their time", s.Source.Version, s.State, s.AppliedAt, before)
		}
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first migrator: %v", err)
	}
	again, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if err := schema.Migrate(again, pools[1]); err != nil {
		t.Fatalf("Migrate after the first finished: %v (its lock must be free)", err)
	}
	assertState(t, pools[1], migrationCount(t))
}
