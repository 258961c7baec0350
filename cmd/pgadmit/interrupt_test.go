package main

import (
	"bytes"
	"context"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// lockCounters holds an ACCESS EXCLUSIVE lock on the counters table of pool's database, as a
// long migration's ALTER TABLE would, until the returned release is called (or the test ends).
func lockCounters(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	return holdLocks(t, pool, dbtest.New().OpsLockCounters)
}

// holdLocks runs lock in a transaction on pool and keeps it open, holding what lock locked,
// until release is called or the test ends.
func holdLocks(t *testing.T, pool *pgxpool.Pool, lock func(context.Context, dbtest.DBTX) error) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock(ctx, tx); err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(ctx) }
	t.Cleanup(release)
	return release
}

// A Ctrl-C while a migration runs is reported as an interrupt, as it is everywhere else in the
// CLI, not as goose's "partial migration error" with the server's cancellation in it.
func TestInterruptDuringMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	cliOK(t, "--database-url", url, "migrate", "up", "--to", "1")
	pool := pgtest.OpenPool(t, url)
	// Migration 2 alters the counters table: it waits behind this lock until the interrupt.
	lockCounters(t, pool)
	for _, args := range [][]string{{"migrate", "up"}, {"demo", "--duration", "5s"}} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errOut bytes.Buffer
			exited := make(chan int, 1)
			go func() {
				exited <- run(ctx, append([]string{"--database-url", url}, args...), &out, &errOut, func(string) string { return "" })
			}()
			pgtest.AwaitLockWaiters(t, pool, "the migration")
			cancel()
			code := <-exited
			if code != exitFailure || errOut.String() != "pgadmit "+args[0]+": interrupted\n" {
				t.Errorf("pgadmit %s interrupted mid-migration: exit %d, stderr %q; want exit 1, \"interrupted\"",
					strings.Join(args, " "), code, errOut.String())
			}
			pgtest.AwaitNoLockWaiters(t, pool, "the migration")
		})
	}
}

// A Ctrl-C that stops migrate up after some migrations were applied still prints each of
// those, as an uninterrupted run does, before "interrupted": it printed only "interrupted", so an
// operator could not tell what the database had got (goose returns what it applied in its
// partial migration error, not in its results). Stopped in a migration that runs outside a
// transaction (CREATE INDEX CONCURRENTLY), it says "interrupted" too, not database/sql's
// "driver: bad connection" for the connection the interrupt closed.
func TestInterruptedMigrateSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	cliOK(t, "--database-url", url, "migrate", "up", "--to", "2")
	pool := pgtest.OpenPool(t, url)
	// Migrations 3 and 4 create functions and tables of their own; 00005's CREATE INDEX
	// CONCURRENTLY, outside a transaction, waits for every transaction whose snapshot is older
	// than its index to end: this one, until the interrupt.
	tx, err := pool.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	release := func() { _ = tx.Rollback(context.Background()) }
	t.Cleanup(release)
	if _, err := db.New().BenchServerSetting(context.Background(), tx, "fsync"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"--database-url", url, "migrate", "up"}, &out, &errOut, func(string) string { return "" })
	}()
	pgtest.AwaitLockWaiters(t, pool, "the migration")
	cancel()
	code := <-exited
	release()
	if code != exitFailure || errOut.String() != "pgadmit migrate: interrupted\n" {
		t.Errorf("migrate up interrupted: exit %d, stderr %q; want exit 1, \"interrupted\"", code, errOut.String())
	}
	v, err := strconv.Atoi(strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")))
	if err != nil {
		t.Fatal(err)
	}
	if v != 4 {
		t.Fatalf("migrate up interrupted at version %d: want 4, 00005 waiting", v)
	}
	var want strings.Builder
	for _, name := range migrationFiles(t)[2:v] {
		fmt.Fprintf(&want, "up   %s (", name)
	}
	got := regexp.MustCompile(`\d+(\.\d+)?[µm]?s\)\n`).ReplaceAllString(out.String(), "")
	if got != want.String() {
		t.Errorf("migrate up interrupted at version %d printed:\n%s\nwant a line for each migration it applied, 3 and 4", v, out.String())
	}
}

// A Ctrl-C that lands once migrate's last migration is done, as goose reads the version it
// reached for its log, makes goose return no results, only that read's error: migrate printed
// only "interrupted", with every migration applied (1 in 40 interrupted downs --to 0). It still
// prints each migration it applied or reverted.
func TestMigrateInterruptedAfterItsLastMigrationSaysWhatItDid(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	cliOK(t, "--database-url", url, "migrate", "up", "--to", "1")
	names := migrationFiles(t)
	for _, c := range []struct {
		args []string
		last string // the migration whose end the interrupt follows
		want string
	}{
		{[]string{"up", "--to", "3"}, names[2], "up   " + names[1] + " (up   " + names[2] + " ("},
		{[]string{"down", "--to", "1"}, names[1], "down " + names[2] + " (down " + names[1] + " ("},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut bytes.Buffer
		a := newApp(&out, &errOut, func(string) string { return "" })
		a.migrated = func(source string) {
			if source == c.last {
				cancel()
			}
		}
		code := runApp(ctx, a, append([]string{"--database-url", url, "migrate"}, c.args...))
		cancel()
		what := "migrate " + strings.Join(c.args, " ") + " interrupted once its last migration was done"
		if code != exitFailure || errOut.String() != "pgadmit migrate: interrupted\n" {
			t.Errorf("%s: exit %d, stderr %q; want exit 1, \"interrupted\"", what, code, errOut.String())
		}
		if got := regexp.MustCompile(`\d+(\.\d+)?[µm]?s\)\n`).ReplaceAllString(out.String(), ""); got != c.want {
			t.Errorf("%s printed:\n%s\nwant a line for each migration it did", what, out.String())
		}
	}
	if v := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")); v != "1" {
		t.Errorf("migrate version = %s, want 1", v)
	}
}

// migrationFiles lists the names of pgadmit's migrations, in order.
func migrationFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// inspect and doctor read tables that a long migration (or another session) may hold locked:
// they give up after --lock-timeout (short here) with an error that says so, naming the bound,
// instead of hanging.
func TestOperatorReadsGiveUpOnALockedTable(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	lockCounters(t, pool)
	const bound = 300 * time.Millisecond
	for _, cmd := range []string{"inspect", "doctor"} {
		t.Run(cmd, func(t *testing.T) {
			// Past the bound, but short of a hang: ctx ends the test if the command waits on.
			ctx, cancel := context.WithTimeout(context.Background(), defaultLockTimeout+10*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			start := time.Now()
			code := run(ctx, []string{"--database-url", url, cmd, "--lock-timeout", "300ms"}, &out, &errOut, func(string) string { return "" })
			took := time.Since(start)
			said := "locked by another session (a migration?): gave up after 300ms (--lock-timeout)"
			if code != exitFailure || !strings.Contains(errOut.String(), said) {
				t.Errorf("pgadmit %s on a locked table: exit %d after %s, stderr %q; want exit 1, %q",
					cmd, code, took.Round(time.Millisecond), errOut.String(), said)
			}
			// The bound, not the default: it gave up sooner than the default lets it.
			if took < bound || took >= defaultLockTimeout {
				t.Errorf("pgadmit %s --lock-timeout 300ms on a locked table gave up after %s, want between %s and %s", cmd, took, bound, defaultLockTimeout)
			}
			pgtest.AwaitNoLockWaiters(t, pool, cmd)
		})
	}
}

// A demo interrupted once its traffic time is up, while its live instances finish their requests
// in flight, ends with "interrupted" on stderr and no summary. It used to print its closing
// tables as a finished run's (the counts of a drain cut short), then fail to read the windows it
// checks and say "interrupted" after them.
func TestDemoInterruptedWhileDrainingPrintsNoSummary(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"--database-url", url, "demo", "--duration", "5s", "--instances", "2", "--clients", "4", "--keys", "20"},
			stdout, stderr, func(string) string { return "" })
	}()
	awaitLog(t, stdout, `(?m)^\s+4s\s`)
	// The live instance's requests in flight wait behind this lock for their counters (and so
	// would the summary's reads of the windows): the drain cannot end before the interrupt,
	// however slow the machine. The progress lines and the watch of the crash read no counters.
	// The lock goes with the interrupt: the demo then gives back what its instances hold, within
	// its grace, and has nothing to warn about.
	unlock := lockCounters(t, pool)
	awaitLog(t, stdout, `stopping: live instances finish their requests in flight`)
	cancel()
	unlock()
	code := <-exited
	if code != exitFailure || stderr.String() != "pgadmit demo: interrupted\n" {
		t.Errorf("demo interrupted while draining: exit %d, stderr %q; want exit 1, only \"interrupted\"", code, stderr.String())
	}
	if h := holdsOf(t, pool); h != (dbHolds{}) {
		t.Errorf("demo interrupted while draining left %+v held, want nothing", h)
	}
	for _, finished := range []string{"SUMMARY", "CRASH AND RECOVERY", "BOOKS", "demo finished"} {
		if strings.Contains(stdout.String(), finished) {
			t.Errorf("demo interrupted while draining printed %q, as a finished run does:\n%s", finished, stdout.String())
		}
	}
}

// So does demo --http interrupted once its load ended, while it shows what a failing database
// does and checks that nothing stays held: it printed the load's totals, the samples and the
// failure policy, then "interrupted".
func TestDemoHTTPInterruptedAfterItsLoadPrintsNoReport(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"--database-url", url, "demo", "--http", "--duration", "5s", "--clients", "4", "--keys", "5"},
			stdout, stderr, func(string) string { return "" })
	}()
	awaitLog(t, stdout, `(?m)^\s+3s\s`)
	// The check that nothing stays held reads the windows behind this lock (and the requests
	// of the load's last seconds fail closed): the report cannot end before the interrupt.
	lockCounters(t, pool)
	awaitLog(t, stdout, `(?m)^\s+5s\s`) // the last second's line, once every client stopped
	cancel()
	code := <-exited
	if code != exitFailure || stderr.String() != "pgadmit demo: interrupted\n" {
		t.Errorf("demo --http interrupted after its load: exit %d, stderr %q; want exit 1, only \"interrupted\"", code, stderr.String())
	}
	for _, finished := range []string{" requests: ", "WHEN THE DATABASE FAILS", "METRICS", "demo --http: ok"} {
		if strings.Contains(stdout.String(), finished) {
			t.Errorf("demo --http interrupted after its load printed %q, as a finished run does:\n%s", finished, stdout.String())
		}
	}
}

// doctor and inspect interrupted while their server is frozen (their statement waiting for a
// lock when it froze) return about endWait (2 s) after the Ctrl-C, as a one-shot recover or
// prune does, with --pass-timeout or without: their statement is given up 1 s after its cancel
// request, and the pool's Close, their last step, is waited for 1 s at most. pgx closes the
// connection of a cancelled statement that got no answer after a cancel request that waits up
// to 15 s for the server, and Close waited for it.
func TestOperatorCommandsInterruptedOnAFrozenServerReturnSoon(t *testing.T) {
	t.Parallel()
	for _, c := range [][]string{{"doctor"}, {"inspect"}, {"doctor", "--pass-timeout", "1m"}, {"inspect", "--pass-timeout", "1m"}} {
		cmd := c[0]
		t.Run(strings.Join(c, " "), func(t *testing.T) {
			t.Parallel()
			dbURL, pool := newDatabase(t)
			f, frozenURL := throughFreezer(t, dbURL, pool, nil)
			lockCounters(t, pool)
			ctx, interrupt := context.WithCancel(context.Background())
			defer interrupt()
			stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
			go func() {
				exited <- run(ctx, append([]string{"--database-url", frozenURL, cmd, "--lock-timeout", "0"}, c[1:]...), stdout, stderr, func(string) string { return "" })
			}()
			pgtest.AwaitLockWaiters(t, pool, cmd)
			f.Freeze()
			interrupted := time.Now()
			interrupt()
			select {
			case code := <-exited:
				took := time.Since(interrupted)
				t.Logf("%s returned %s after the interrupt", cmd, took.Round(time.Millisecond))
				// The cancel request's acknowledgement, waited for 1 s, the pool's close, 1 s at most,
				// and room for a loaded machine.
				if code != exitFailure || stderr.String() != "pgadmit "+cmd+": interrupted\n" || took > endWait+1500*time.Millisecond {
					t.Errorf("%s interrupted on a frozen server: exit %d after %s, stderr %q; want exit 1 within %s, interrupted",
						cmd, code, took.Round(time.Millisecond), stderr.String(), endWait+1500*time.Millisecond)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s interrupted on a frozen server did not return within 60s; stderr %q", cmd, stderr.String())
			}
		})
	}
}

// A Ctrl-C that lands between the statements of a migration that runs outside a transaction
// (00005, 00010, 00022: CREATE INDEX CONCURRENTLY) finds goose's connection closed by the
// cancellation of the statement before: database/sql says "driver: bad connection", which, once
// ctx is cancelled, is the interrupt too. One in ten interrupted migrate ups said
// "up 00005_maintenance_indexes.sql failed: driver: bad connection" instead of "interrupted".
// Before an interrupt, a closed connection is a failure.
func TestInterruptedCountsTheConnectionItClosed(t *testing.T) {
	t.Parallel()
	// As migrateUpDown words goose's partial migration error.
	failed := fmt.Errorf("up 00005_maintenance_indexes.sql failed: %w", driver.ErrBadConn)
	ctx, cancel := context.WithCancel(context.Background())
	if interrupted(ctx, failed) {
		t.Errorf("interrupted(%v) before the interrupt = true, want a failure", failed)
	}
	cancel()
	if !interrupted(ctx, failed) {
		t.Errorf("interrupted(%v) once ctx was cancelled = false, want true", failed)
	}
}
