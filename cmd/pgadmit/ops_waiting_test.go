package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// stillWaiting is the line a one-shot recover or prune says on stderr, every --progress, while
// no batch of it ends.
const stillWaiting = `pgadmit (recover|prune): so far \(\d+s, \d+ batch(es)?(, now at "[a-z ]+"\)|\)): ([^\n]*; )?` +
	`no batch has ended for \d+s: still waiting for the database \(a lock another session holds, or a server that stopped answering; ` +
	`(--pass-timeout bounds the run, Ctrl-C stops it|it is cut off at --pass-timeout \(\d+s\), [1-9]\d*s from now)\)\n`

// A one-shot recover or prune whose batch waits (here behind a table lock another session holds,
// with --lock-timeout 0; elsewhere on a server that stopped answering) says on stderr, every
// --progress, that it is still waiting, as doctor says it is still checking: its progress lines
// came only after a batch, so it printed nothing until Ctrl-C. Once the lock goes it ends as
// usual, its result on stdout alone.
func TestRecoverAndPruneSayTheyAreStillWaiting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd, result string
		lock        func(context.Context, dbtest.DBTX) error // the table its batch waits for
	}{
		{"recover", `^nothing to recover \(\d+(\.\d+)?m?s\)\n$`, dbtest.New().OpsLockTasks},
		{"prune", `^pruned before \S+: released 0 stale reservations; .* \(\d+(\.\d+)?m?s\)\n$`, dbtest.New().OpsLockCounters},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			release := holdLocks(t, pool, c.lock)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
			go func() {
				exited <- run(ctx, []string{"--database-url", url, c.cmd, "--progress", "200ms", "--lock-timeout", "0"},
					stdout, stderr, func(string) string { return "" })
			}()
			pgtest.AwaitLockWaiters(t, pool, c.cmd)
			awaitLog(t, stderr, `(?m)^`+stillWaiting+`(.*\n)*`+stillWaiting)
			release()
			if code := <-exited; code != exitOK || !regexp.MustCompile(c.result).MatchString(stdout.String()) {
				t.Errorf("%s once the table was free: exit %d, stdout %q, stderr %q", c.cmd, code, stdout.String(), stderr.String())
			}
			batch := `pgadmit ` + c.cmd + `: so far \(\d+s, \d+ batch(es)?, now at "[a-z ]+"\): [^\n]*\n`
			if !regexp.MustCompile(`^(` + batch + `|` + stillWaiting + `)+$`).MatchString(stderr.String()) {
				t.Errorf("%s --progress 200ms behind a table lock: stderr %q", c.cmd, stderr.String())
			}
		})
	}
}

// A one-shot recover or prune on a server that stopped answering (its host froze while a batch
// waited: no lock_timeout can end that wait, the server is not there to apply it) says that it
// is still waiting, and --pass-timeout cuts it off, exit 1, naming the bound, as it cuts off a
// pass of the sweeper: --pass-timeout was refused without --every, and the run hung until Ctrl-C.
// Once cut off it waits endWait at most for its statement's cancel and its lease's release,
// which the server does not answer, and says that the lease may stay held: it waited 6-7 s more.
func TestRecoverAndPruneOnAFrozenServerAreCutOffByPassTimeout(t *testing.T) {
	t.Parallel()
	for cmd, lock := range map[string]func(context.Context, dbtest.DBTX) error{
		"recover": dbtest.New().OpsLockTasks, "prune": dbtest.New().OpsLockCounters,
	} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			r := runUntilFrozen(t, context.Background(), lock, cmd, "--progress", "500ms", "--pass-timeout", "3s")
			stdout, stderr, waited := r.stdout, r.stderr, r.frozen
			select {
			case code := <-r.exited:
				took := time.Since(waited)
				t.Logf("%s returned %s after it waited; stdout %q, stderr:\n%s", cmd, took.Round(time.Millisecond), stdout.String(), stderr.String())
				last := stderr.String()[strings.LastIndex(strings.TrimSuffix(stderr.String(), "\n"), "\n")+1:]
				if code != exitFailure || !strings.HasPrefix(last, "pgadmit "+cmd+": cut off by --pass-timeout (3s): ") ||
					!strings.Contains(last, "the lease may stay held, at most 15s from now (a run before then is skipped)") {
					t.Errorf("%s --pass-timeout 3s on a frozen server: exit %d, stdout %q, stderr %q; want exit 1, cut off by --pass-timeout, "+
						"its lease perhaps left held", cmd, code, stdout.String(), stderr.String())
				}
				// What it did is printed, as after any cut-off: prune's first step was done.
				if want := map[string]string{"recover": `^$`, "prune": `^pruned before \S+: released 0 stale reservations; .* \(\d+(\.\d+)?m?s\)\n$`}[cmd]; !regexp.MustCompile(want).MatchString(stdout.String()) {
					t.Errorf("%s cut off on a frozen server: stdout %q, want it to match %s", cmd, stdout.String(), want)
				}
				// While frozen it says that it still waits; once cut off, while its statement is
				// cancelled and its lease given back (endWait at most), that it is still ending,
				// never that it still waits.
				ending := `pgadmit ` + cmd + `: so far \(\d+s, \d+ batch(es)?(, now at "[a-z ]+"\)|\)): ([^\n]*; )?` +
					`cut off by --pass-timeout \(3s\): still ending \(cancelling its statement and giving back the run's lease( if it took one)?\)\n`
				if !regexp.MustCompile(`^(`+stillWaiting+`|pgadmit prune: so far [^\n]*now at "release stale reservations"\): [^\n]*\n)+(`+
					ending+`)*pgadmit `+cmd+`: cut off by --pass-timeout \(3s\): [^\n]*\n$`).MatchString(stderr.String()) ||
					!strings.Contains(stderr.String(), "still waiting") {
					t.Errorf("%s on a frozen server: stderr %q; want that it still waits, then that it still ends, then cut off", cmd, stderr.String())
				}
				// 3s at most since it waited, then endWait (2s) for the cancel request and the
				// release of the run's lease, and room for a loaded machine.
				if took > 3*time.Second+endWait+1500*time.Millisecond {
					t.Errorf("%s --pass-timeout 3s on a frozen server returned after %s", cmd, took.Round(time.Millisecond))
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s --pass-timeout 3s on a frozen server did not return within 60s; stderr %q", cmd, stderr.String())
			}
		})
	}
}

// A one-shot recover or prune whose server stops answering while it reads the schema version
// (here the read waits for a lock on the version table when the server freezes) is cut off by
// --pass-timeout as its pass is: the read came before the bound started, and waited for ever.
func TestRecoverAndPruneOnAFrozenServerAreCutOffWhileReadingTheSchemaVersion(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"recover", "prune"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			r := runUntilFrozen(t, context.Background(), dbtest.New().OpsLockVersionTable, cmd, "--progress", "0", "--pass-timeout", "2s")
			stdout, stderr, waited := r.stdout, r.stderr, r.frozen
			select {
			case code := <-r.exited:
				t.Logf("%s returned %s after it waited; stderr %q", cmd, time.Since(waited).Round(time.Millisecond), stderr.String())
				want := "pgadmit " + cmd + ": cut off by --pass-timeout (2s): reading the schema version: context deadline exceeded\n"
				if code != exitFailure || stdout.String() != "" || stderr.String() != want {
					t.Errorf("%s --pass-timeout 2s, frozen while it read the schema version: exit %d, stdout %q, stderr %q; want exit 1 and %q",
						cmd, code, stdout.String(), stderr.String(), want)
				}
				// 2s at most since it waited, then the cancel request's wait for a server that
				// does not answer (1s), the pool's close (1s at most), and room for a loaded
				// machine.
				if took := time.Since(waited); took > 8*time.Second {
					t.Errorf("%s --pass-timeout 2s returned %s after it waited for the schema version", cmd, took.Round(time.Millisecond))
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s --pass-timeout 2s, frozen while it read the schema version, did not return within 30s; stderr %q", cmd, stderr.String())
			}
		})
	}
}

// The sweeper's start-up checks (the schema version, the connection pooler) are bounded by
// --pass-timeout as its passes are: on a server that stopped answering during them, it hung at
// start-up, no pass run or logged, until a signal.
func TestRecoverSweeperOnAFrozenServerCutsOffItsStartUpChecks(t *testing.T) {
	t.Parallel()
	dbURL, pool := newDatabase(t)
	f, frozenURL := throughFreezer(t, dbURL, pool, nil)
	holdLocks(t, pool, dbtest.New().OpsLockVersionTable)
	sweeper := startCLI(t, context.Background(), "--database-url", frozenURL, "--connect-timeout", "500ms",
		"recover", "--every", "200ms", "--pass-timeout", "1s")
	pgtest.AwaitLockWaiters(t, pool, "recover --every")
	f.Freeze()
	awaitLog(t, &sweeper.stdout, `recover: pass failed: `)
	t.Logf("stdout:\n%s\nstderr:\n%s", sweeper.stdout.String(), sweeper.stderr.String())
	if want := "pgadmit recover: warning: the start-up checks (the schema version, the connection pooler) were cut off by --pass-timeout (1s)"; !strings.Contains(sweeper.stderr.String(), want) {
		t.Errorf("recover --every on a server frozen during its start-up checks: stderr %q, want it to contain %q", sweeper.stderr.String(), want)
	}
}

// A one-shot recover or prune interrupted on a server that stopped answering waits endWait at
// most for its statement's cancel and its lease's release, as one cut off does, and says that
// the lease may stay held: it waited 6-7 s more.
func TestRecoverAndPruneInterruptedOnAFrozenServerEndWithinEndWait(t *testing.T) {
	t.Parallel()
	for cmd, lock := range map[string]func(context.Context, dbtest.DBTX) error{
		"recover": dbtest.New().OpsLockTasks, "prune": dbtest.New().OpsLockCounters,
	} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			r := runUntilFrozen(t, ctx, lock, cmd, "--progress", "0")
			stdout, stderr := r.stdout, r.stderr
			cancel()
			interrupted := time.Now()
			select {
			case code := <-r.exited:
				took := time.Since(interrupted)
				t.Logf("%s returned %s after the interrupt; stdout %q, stderr %q", cmd, took.Round(time.Millisecond), stdout.String(), stderr.String())
				want := "pgadmit " + cmd + ": warning: the database did not answer within 2s of the interrupt: its statement's cancel and the " +
					"release of its lease were not waited for, and the lease may stay held, at most 15s from now (a run before then is skipped)\n" +
					"pgadmit " + cmd + ": interrupted\n"
				if code != exitFailure || stderr.String() != want {
					t.Errorf("%s interrupted on a frozen server: exit %d, stderr %q; want exit 1 and %q", cmd, code, stderr.String(), want)
				}
				if took > endWait+1500*time.Millisecond {
					t.Errorf("%s interrupted on a frozen server returned %s after the interrupt", cmd, took.Round(time.Millisecond))
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s interrupted on a frozen server did not return within 30s; stderr %q", cmd, stderr.String())
			}
		})
	}
}

// On a live server a one-shot recover or prune cut off by --pass-timeout (here behind a table
// lock, with --lock-timeout 0) has its statement cancelled and its lease given back well within
// endWait: a run right after it is not skipped.
func TestRecoverAndPruneCutOffOnALiveServerGiveTheirLeaseBack(t *testing.T) {
	t.Parallel()
	for cmd, lock := range map[string]func(context.Context, dbtest.DBTX) error{
		"recover": dbtest.New().OpsLockTasks, "prune": dbtest.New().OpsLockCounters,
	} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			release := holdLocks(t, pool, lock)
			_, errOut, code := cli(t, nil, "--database-url", url, cmd, "--progress", "0", "--lock-timeout", "0", "--pass-timeout", "1s")
			if code != exitFailure || !strings.HasPrefix(errOut, "pgadmit "+cmd+": cut off by --pass-timeout (1s): ") || strings.Contains(errOut, "may stay held") {
				t.Errorf("%s --pass-timeout 1s behind a lock: exit %d, stderr %q; want cut off, its lease given back", cmd, code, errOut)
			}
			release()
			out, errOut, code := cli(t, nil, "--database-url", url, cmd, "--progress", "0")
			if code != exitOK || strings.Contains(out, "skipped") || errOut != "" {
				t.Errorf("%s right after a run cut off: exit %d, stdout %q, stderr %q; want it run, not skipped", cmd, code, out, errOut)
			}
		})
	}
}

// frozenRun is a run of the CLI whose server stopped answering while its statement waited for a
// lock (runUntilFrozen).
type frozenRun struct {
	stdout, stderr *syncBuffer
	exited         chan int // its exit code
	frozen         time.Time
}

// runUntilFrozen runs the CLI with args, after --database-url, in ctx, on a database of its own
// reached through a freezer where lock is held; once the command's statement waits for it, the
// server stops answering.
func runUntilFrozen(t *testing.T, ctx context.Context, lock func(context.Context, dbtest.DBTX) error, cmd string, args ...string) frozenRun {
	t.Helper()
	dbURL, pool := newDatabase(t)
	f, frozenURL := throughFreezer(t, dbURL, pool, nil)
	holdLocks(t, pool, lock)
	r := frozenRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan int, 1)}
	go func() {
		r.exited <- run(ctx, append([]string{"--database-url", frozenURL, cmd}, args...), r.stdout, r.stderr, func(string) string { return "" })
	}()
	pgtest.AwaitLockWaiters(t, pool, cmd)
	f.Freeze()
	r.frozen = time.Now()
	return r
}

// The sweeper interrupted mid-pass on a server that stopped answering waits endWait at most for
// the pass's statement's cancel and its lease's release, as a one-shot recover does, logs that
// the lease may stay held, and stops as usual (exit 0): its pass ran in the sweeper's loop, which
// waited 6-7 s more.
func TestRecoverSweeperInterruptedOnAFrozenServerEndsWithinEndWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := runUntilFrozen(t, ctx, dbtest.New().OpsLockTasks, "recover", "--every", "200ms", "--pass-timeout", "1m")
	cancel()
	interrupted := time.Now()
	select {
	case code := <-r.exited:
		took := time.Since(interrupted)
		t.Logf("recover --every returned %s after the interrupt; stdout:\n%s\nstderr %q", took.Round(time.Millisecond), r.stdout.String(), r.stderr.String())
		end := `(?m)^\S+ recover: stopped mid-pass: the database did not answer within 2s of the interrupt: its statement's cancel and the ` +
			`release of its lease were not waited for, and the lease may stay held, at most 15s from now \(a run before then is skipped\)\n` +
			`\S+ recover: stopped\n\z`
		if code != exitOK || r.stderr.String() != "" || !regexp.MustCompile(end).MatchString(r.stdout.String()) {
			t.Errorf("recover --every interrupted on a frozen server: exit %d, stdout %q, stderr %q; want its pass given up on, "+
				"its lease perhaps left held, then stopped", code, r.stdout.String(), r.stderr.String())
		}
		if took > endWait+1500*time.Millisecond {
			t.Errorf("recover --every interrupted on a frozen server returned %s after the interrupt", took.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("recover --every interrupted on a frozen server did not return within 30s; stdout %q", r.stdout.String())
	}
}
