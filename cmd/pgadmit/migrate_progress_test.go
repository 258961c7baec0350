package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// testMigrateProgressEvery is how often migrate says what it waits for in these tests: shorter
// than its 5s, so that they take a few seconds rather than 7 to 11, but well above how long
// migrate takes to reach the lock, or a migration to run, on a loaded machine (half a second),
// so that only the waits they set up are said.
const testMigrateProgressEvery = 2 * time.Second

// startMigrate runs pgadmit migrate with args on url in the background, saying what it waits for
// every testMigrateProgressEvery, and returns its output streams and a channel that receives its
// exit code.
func startMigrate(t *testing.T, url string, args ...string) (stdout, stderr *syncBuffer, exited chan int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return startMigrateIn(ctx, url, args...)
}

// startMigrateIn is startMigrate until ctx ends (a Ctrl-C).
func startMigrateIn(ctx context.Context, url string, args ...string) (stdout, stderr *syncBuffer, exited chan int) {
	stdout, stderr, exited = &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	a := newApp(stdout, stderr, func(string) string { return "" })
	a.migrateProgressEvery = testMigrateProgressEvery
	go func() {
		exited <- runApp(ctx, a, append([]string{"--database-url", url, "migrate"}, args...))
	}()
	return stdout, stderr, exited
}

// migrate up behind another migrator's lock row says that it waits, and for what, instead of
// sitting silent for up to the locker's 5 minutes; once the lock is free it migrates.
func TestMigrateSaysItWaitsForTheLock(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	_, unlock := pgtest.AnotherMigrator(t, context.Background(), url)
	stdout, stderr, exited := startMigrate(t, url, "up")
	awaitLog(t, stderr, `^pgadmit migrate: waited [0-9]+s for the migration lock, which another migrator holds \(one that died frees it within 30s; the wait ends after 5m, or at Ctrl-C\)\n`)
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if code := <-exited; code != exitOK || !strings.Contains(stdout.String(), "schema version ") {
		t.Errorf("migrate up once the lock was free: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	for line := range strings.Lines(stderr.String()) {
		// Once the lock was free, a slow machine may take more than an interval over a
		// migration, which it says too (CI under load saw "still applying 00001_init.sql").
		if !strings.HasPrefix(line, "pgadmit migrate: waited ") && !strings.HasPrefix(line, "pgadmit migrate: still applying ") {
			t.Errorf("migrate up behind the lock: stderr line %q", line)
		}
	}
}

// migrate up that loses its database while it waits for another migrator's lock row says so,
// rather than that the other migrator still holds the lock: goose's locker tries again after a
// lost connection as it does after a lock row held, for up to 5 minutes.
func TestMigrateSaysItLostTheDatabaseWhileItWaits(t *testing.T) {
	t.Parallel()
	c := pgtest.OwnCluster(t) // crashed below
	url := c.URL()
	// The other migrator's heartbeat runs until lockCtx ends (it cannot give the row up once the
	// server is gone).
	lockCtx, stopHeartbeat := context.WithCancel(context.Background())
	pgtest.AnotherMigrator(t, lockCtx, url)
	t.Cleanup(stopHeartbeat) // before the migrator's pool is closed
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	_, stderr, exited := startMigrateIn(ctx, url, "up")
	awaitLog(t, stderr, `^pgadmit migrate: waited [0-9]+s for the migration lock, which another migrator holds`)
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, stderr, `\npgadmit migrate: waited [0-9]+s for the migration lock, but lost the connection to the database \([^\n]+\); `+
		`it keeps trying until the wait ends after 5m, or at Ctrl-C\n`)
	interrupt()
	if code := <-exited; code != exitFailure || !strings.HasSuffix(stderr.String(), "\npgadmit migrate: interrupted\n") {
		t.Errorf("migrate up interrupted while its database was down: exit %d, stderr %q; want exit 1, interrupted", code, stderr.String())
	}
}

// migrate up whose database froze (its host stopped answering) while it waits for another
// migrator's lock row says so; not that goose's locker keeps trying until its 5 minutes end: the
// locker's statement waits for an answer with no bound but Ctrl-C (the 5 minutes count its
// tries), and Ctrl-C still stops migrate, a ping of a progress line in flight or not.
func TestMigrateSaysItsDatabaseFrozeWhileItWaits(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyURL(t)
	pool, unlock := pgtest.AnotherMigrator(t, context.Background(), dbURL)
	t.Cleanup(func() { _ = unlock() })
	// migrate goes through a freezer. A connection it opens once frozen waits out its connect
	// timeout (goose's locker then tries again, on a new one): a long one keeps it on one try here.
	// The pool's ping of an idle connection, which is bounded by the connect timeout unless the
	// URL bounds it (TestPoolPingTimeoutIsTheConnectTimeout), is kept short.
	f, frozenURL := throughFreezer(t, dbURL, pool, map[string]string{"connect_timeout": "60", "pool_ping_timeout": "2s"})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	_, stderr, exited := startMigrateIn(ctx, frozenURL, "up")
	awaitLog(t, stderr, `^pgadmit migrate: waited [0-9]+s for the migration lock, which another migrator holds`)
	f.Freeze()
	awaitLog(t, stderr, `\npgadmit migrate: waited [0-9]+s for the migration lock, but the database did not answer within 2s; `+
		`it waits for an answer \(Ctrl-C stops the wait\)\n`)
	interrupt()
	select {
	case code := <-exited:
		if code != exitFailure || !strings.HasSuffix(stderr.String(), "\npgadmit migrate: interrupted\n") {
			t.Errorf("migrate up interrupted while its database was frozen: exit %d, stderr %q; want exit 1, interrupted", code, stderr.String())
		}
	case <-time.After(45 * time.Second):
		// pgx closes a connection that got no answer after a cancel request of up to 15s, which
		// the pool's Close waits for; an unbounded ping held one for a minute more.
		t.Fatalf("migrate up did not stop within 45s of Ctrl-C while its database was frozen; stderr %q", stderr.String())
	}
}

// What the wait for the lock is said to wait for follows what reach finds of the database: the
// lock row another migrator holds while it answers, the database when it does not.
func TestMigrateLockWaitSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(-7 * time.Second)
	answers := func(context.Context) error { return nil }
	refused := func(context.Context) error { return errors.New("dial error: connection refused") }
	hangs := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	for _, c := range []struct {
		reach func(context.Context) error
		want  string
	}{
		{answers, "pgadmit migrate: waited 7s for the migration lock, which another migrator holds (one that died frees it within 30s; the wait ends after 5m, or at Ctrl-C)\n"},
		{refused, "pgadmit migrate: waited 7s for the migration lock, but lost the connection to the database (dial error: connection refused); it keeps trying until the wait ends after 5m, or at Ctrl-C\n"},
		{hangs, "pgadmit migrate: waited 7s for the migration lock, but the database did not answer within 50ms; it waits for an answer (Ctrl-C stops the wait)\n"},
	} {
		// How long it waited is rounded to a second: a loaded machine may make it 8s.
		re := "^" + strings.Replace(regexp.QuoteMeta(c.want), "waited 7s", "waited [0-9]+s", 1) + "$"
		if got := (&migrateWatch{}).lockWait(context.Background(), start, 50*time.Millisecond, c.reach); !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("lockWait = %q, want %q", got, c.want)
		}
	}
	// The step took the lock, or ended, while reach ran: nothing to say.
	w := &migrateWatch{}
	if got := w.lockWait(context.Background(), start, time.Second, func(context.Context) error { w.locked = true; return nil }); got != "" {
		t.Errorf("lockWait once the lock was taken = %q, want nothing", got)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if got := (&migrateWatch{}).lockWait(ended, start, time.Second, hangs); got != "" {
		t.Errorf("lockWait once the step ended = %q, want nothing", got)
	}
}

// A migration that waits (here behind a table lock another session holds; elsewhere an index
// built on a large table) is named on stderr while it runs, rather than the step being silent
// until it ends; a quick migrate prints nothing there.
func TestMigrateSaysWhichMigrationRunsLong(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	if _, errOut, code := cli(t, nil, "--database-url", url, "migrate", "up", "--to", "1"); code != exitOK || errOut != "" {
		t.Fatalf("migrate up --to 1: exit %d, stderr %q, want exit 0 and nothing on stderr", code, errOut)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Migration 2 alters the counters table: it waits behind this lock.
	release := lockCounters(t, pool)
	stdout, stderr, exited := startMigrate(t, url, "up", "--to", "2")
	awaitLog(t, stderr, `^pgadmit migrate: still applying 00002_lean_hot_tables\.sql after [0-9]+s\n`)
	release()
	if code := <-exited; code != exitOK || !strings.Contains(stdout.String(), "schema version 2\n") {
		t.Errorf("migrate up --to 2 once the table was free: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if !regexp.MustCompile(`^(pgadmit migrate: still applying 00002_lean_hot_tables\.sql after [0-9]+s\n)+$`).MatchString(stderr.String()) {
		t.Errorf("migrate up --to 2 behind a table lock: stderr %q", stderr.String())
	}
}
