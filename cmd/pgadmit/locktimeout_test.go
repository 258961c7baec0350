package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A run whose every error is a lock wait is told as one, with its advice
// to run again once the other session lets go; a run that also failed
// otherwise (cut off by its deadline, the connection lost) is told by its
// own errors: that advice would hide why it stopped.
func TestLockWaitedOnlyWhenEveryErrorIsALockWait(t *testing.T) {
	wait := func() error {
		return fmt.Errorf("ratelimit: recover: reclaim expired tasks: %w", &ratelimit.LockWaitError{
			Job: "recover", Step: "reclaim expired tasks", Rows: 1, Err: &pgconn.PgError{Code: "55P03"},
		})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"one lock wait", wait(), true},
		{"lock waits of two steps", errors.Join(wait(), wait()), true},
		{"a lock wait, then the deadline", errors.Join(fmt.Errorf("ratelimit: recover: x: %w", context.DeadlineExceeded), wait()), false},
		{"a lock wait and a rejected row", errors.Join(wait(), &pgconn.PgError{Code: "23514"}), false},
		{"no lock wait", context.DeadlineExceeded, false},
	} {
		var lw *lockWaitError
		if got := errors.As(lockWaited(tc.err, defaultLockTimeout), &lw); got != tc.want {
			t.Errorf("%s: told as a lock wait: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The errors of a lock wait name the bound the command had (--lock-timeout, as an operator writes
// it), not a fixed 5s; with --lock-timeout 0 pgadmit set none, and the server's own lock_timeout
// (a role's or database's) is what gave up.
func TestLockErrorsNameTheirBound(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	wait := fmt.Errorf("ratelimit: prune: counters: %w", &ratelimit.LockWaitError{Job: "prune", Step: "counters", Rest: true, Err: timedOut})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{lockTimedOut(timedOut, 1500*time.Millisecond), "locked by another session (a migration?): gave up after 1.5s (--lock-timeout); try again later"},
		{lockTimedOut(timedOut, 2*time.Minute), "gave up after 2m (--lock-timeout);"},
		{lockTimedOut(timedOut, 0), "gave up after the server's own lock_timeout (--lock-timeout 0 sets none);"},
		// lock_timeout is whole milliseconds: a bound between two is set as the next.
		{lockTimedOut(timedOut, 1500*time.Microsecond), "gave up after 2ms (--lock-timeout);"},
		{lockWaited(wait, time.Nanosecond), "gave up on them after 1ms (--lock-timeout)"},
		{lockTimedOut(timedOut, 2147483647*time.Millisecond), "gave up after 596h31m23.647s (--lock-timeout);"},
		{lockWaited(wait, 300*time.Millisecond), "gave up on them after 300ms (--lock-timeout) and left what it could not lock"},
		{lockWaited(wait, 0), "gave up on them after the server's own lock_timeout (--lock-timeout 0 sets none) and left"},
		// The take of a run's lease waits 4 s at most, whatever --lock-timeout says: the error's Bound.
		{lockWaited(fmt.Errorf("ratelimit: recover: take the recover lease: %w", &ratelimit.LockWaitError{Job: "recover", Step: "take the recover lease", Bound: 4 * time.Second, Rest: true, Err: timedOut}), 5*time.Second),
			"gave up on them at the bound of a run's lease (less than --lock-timeout 5s) and did nothing;"},
		{lockWaited(&ratelimit.LockWaitError{Bound: 300 * time.Millisecond, Err: timedOut}, 300*time.Millisecond), "gave up on them at --lock-timeout and left"},
	} {
		if got := tc.err.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("%q does not say %q", got, tc.want)
		}
	}
}

// The largest --lock-timeout is lock_timeout's own (INT_MAX ms), which the server takes as it is;
// a longer one is refused (TestUsageErrors) rather than capped under a message that names it.
func TestLockTimeoutUpToPostgresRange(t *testing.T) {
	t.Parallel()
	const largest = 2147483647 * time.Millisecond // 596h31m23.647s
	if err := checkLockTimeout(largest); err != nil {
		t.Errorf("checkLockTimeout(%s) = %v, want nil", largest, err)
	}
	var ue *usageError
	if err := checkLockTimeout(largest + time.Nanosecond); !errors.As(err, &ue) {
		t.Errorf("checkLockTimeout(%s) = %v, want a usage error", largest+time.Nanosecond, err)
	}
	url, _ := newDatabase(t)
	for _, cmd := range []string{"inspect", "doctor", "recover"} {
		if out, errOut, code := cli(t, nil, "--database-url", url, cmd, "--lock-timeout", "596h31m23.647s"); code != exitOK {
			t.Errorf("pgadmit %s --lock-timeout 596h31m23.647s: exit %d, stdout %q, stderr %q; want exit 0", cmd, code, out, errOut)
		}
	}
}

// inspect sets lock_timeout to --lock-timeout rounded up to a whole millisecond, exactly (sent as
// float seconds, 1.132s was set as 1133ms), up to the largest --lock-timeout, lock_timeout's
// own; and the bound the errors of a wait name (gaveUpAfter) is the one set.
func TestInspectSetsTheLockTimeoutItNames(t *testing.T) {
	t.Parallel()
	_, pool := newDatabase(t)
	ctx := context.Background()
	set := func(bound time.Duration) (int64, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := boundLockWaits(ctx, db.New(), tx, bound); err != nil {
			return 0, err
		}
		return dbtest.New().OpsLockTimeoutMillis(ctx, tx)
	}
	for _, c := range []struct {
		bound time.Duration
		want  int64
	}{
		{1132 * time.Millisecond, 1132},
		{1257 * time.Millisecond, 1257},
		{5 * time.Second, 5000},
		{1500 * time.Microsecond, 2},
		{time.Nanosecond, 1},
		{2147483646 * time.Millisecond, 2147483646},
		{maxLockTimeout, 2147483647},
	} {
		got, err := set(c.bound)
		named, want := gaveUpAfter(c.bound), durationtext.Operator(time.Duration(c.want)*time.Millisecond)+" (--lock-timeout)"
		if err != nil || got != c.want || named != want {
			t.Errorf("--lock-timeout %s: set lock_timeout to %dms (%v), named %q; want %dms, named %q", c.bound, got, err, named, c.want, want)
		}
	}
}

// inspect's transaction runs with jit off, with --lock-timeout and without (0, which leaves
// lock_timeout as the session has it): its reads are planned for every row of the tables they
// read, and compiling them cost more than it saved. The session's jit is as before after it.
func TestInspectTurnsJITOffForItsTransactionOnly(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	ctx := context.Background()
	before, err := dbtest.New().OpsCurrentJIT(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if before != "on" {
		t.Skipf("the server's jit is %q: nothing to turn off", before)
	}
	for _, bound := range []time.Duration{0, 5 * time.Second} {
		func() {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if err := boundLockWaits(ctx, db.New(), tx, bound); err != nil {
				t.Fatalf("--lock-timeout %s: %v", bound, err)
			}
			jit, err := dbtest.New().OpsCurrentJIT(ctx, tx)
			if err != nil || jit != "off" {
				t.Errorf("--lock-timeout %s: inspect's transaction runs with jit %q (%v), want off", bound, jit, err)
			}
			lt, err := dbtest.New().OpsLockTimeoutMillis(ctx, tx)
			if want := bound.Milliseconds(); err != nil || lt != want {
				t.Errorf("--lock-timeout %s: lock_timeout %dms (%v), want %dms", bound, lt, err, want)
			}
		}()
	}
	// inspect itself, on a pool of one session: the session's jit is on after it.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	for _, bound := range []time.Duration{0, 5 * time.Second} {
		if _, err := readInspect(ctx, one, pgtype.Text{}, pgtype.Text{}, 1, bound); err != nil {
			t.Fatalf("readInspect(--lock-timeout %s): %v", bound, err)
		}
		if jit, err := dbtest.New().OpsCurrentJIT(ctx, one); err != nil || jit != "on" {
			t.Errorf("after inspect (--lock-timeout %s) the session's jit is %q (%v), want on as before", bound, jit, err)
		}
	}
}

// --lock-timeout 0 sets no lock_timeout of pgadmit's: the commands wait as long as the server lets
// them. Where the server has a lock_timeout of its own (here from the connection string; a role's
// or a database's setting does the same) that one gives up, sooner than the default 5s would, and
// the error says whose bound it was.
func TestLockTimeoutZeroSetsNone(t *testing.T) {
	t.Parallel()
	const serverBound = 300 * time.Millisecond
	for _, c := range []struct {
		args []string
		lock func(context.Context, dbtest.DBTX) error
		said string
	}{
		{[]string{"inspect"}, dbtest.New().OpsLockCounters, "gave up after the server's own lock_timeout (--lock-timeout 0 sets none)"},
		{[]string{"doctor"}, dbtest.New().OpsLockCounters, "gave up after the server's own lock_timeout (--lock-timeout 0 sets none)"},
		{[]string{"recover"}, dbtest.New().OpsLockTasks, "gave up on them after the server's own lock_timeout (--lock-timeout 0 sets none)"},
		{[]string{"prune", "--older-than", "1s"}, dbtest.New().OpsLockCounters, "gave up on them after the server's own lock_timeout (--lock-timeout 0 sets none)"},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			holdLocks(t, pool, c.lock)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			args := append(append([]string{"--database-url", url + "&lock_timeout=300ms"}, c.args...), "--lock-timeout", "0")
			start := time.Now()
			code := run(ctx, args, &out, &errOut, func(string) string { return "" })
			took := time.Since(start)
			if code != exitFailure || !strings.Contains(errOut.String(), c.said) {
				t.Errorf("pgadmit %s --lock-timeout 0 behind the server's lock_timeout of 300ms: exit %d after %s, stderr %q; want exit 1, %q",
					c.args[0], code, took.Round(time.Millisecond), errOut.String(), c.said)
			}
			// pgadmit's default would have set 5s for its transactions, over the session's 300ms.
			if took < serverBound || took >= defaultLockTimeout {
				t.Errorf("pgadmit %s --lock-timeout 0 gave up after %s, want the server's %s (and less than the default %s)", c.args[0], took, serverBound, defaultLockTimeout)
			}
		})
	}
	// Without a lock_timeout of the server's, it waits until the lock goes, and then does its work.
	t.Run("no bound", func(t *testing.T) {
		t.Parallel()
		url, pool := newDatabase(t)
		release := lockCounters(t, pool)
		exited := make(chan int, 1)
		var out, errOut syncBuffer
		go func() {
			exited <- run(context.Background(), []string{"--database-url", url, "doctor", "--lock-timeout", "0"}, &out, &errOut, func(string) string { return "" })
		}()
		pgtest.AwaitLockWaiters(t, pool, "doctor")
		release()
		if code := <-exited; code != exitOK || !strings.Contains(out.String(), "the books balance") {
			t.Errorf("doctor --lock-timeout 0 once the lock went: exit %d, stdout %q, stderr %q; want exit 0, the books balance", code, out.String(), errOut.String())
		}
	})
}

// --lock-timeout's help says what each command does past it: inspect and doctor give up and exit
// 1; recover and prune leave the batch, do the rest and exit 1, but recover --every, a sweeper,
// logs the pass as failed and goes on (TestRecoverSweeperGivesUpAfterItsLockTimeout), exit 0 at
// its stop.
func TestLockTimeoutHelpSaysWhatEachCommandDoesPastIt(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]string{
		"inspect": "then give up on it and exit 1 (0: no bound)",
		"doctor":  "then give up on it and exit 1 (0: no bound)",
		"prune":   "then leave that batch to a later run, do the rest and exit 1 (0: no bound)",
		"recover": "then leave that batch to a later pass, do the rest and exit 1; with --every, log the pass as failed and sweep on (0: no bound)",
	} {
		out := cliOK(t, cmd, "--help")
		_, usage, _ := strings.Cut(out, "  --lock-timeout duration\n")
		usage, _, _ = strings.Cut(usage, "\n")
		if !strings.Contains(usage, want) {
			t.Errorf("pgadmit %s --help: --lock-timeout says %q, want %q", cmd, usage, want)
		}
	}
	recoverHelp := cliOK(t, "recover", "--help")
	if !strings.Contains(strings.Join(strings.Fields(recoverHelp), " "), "exit 1 (with --every, the pass is logged as failed, after its counts, and the sweeper goes on)") {
		t.Errorf("pgadmit recover --help does not say what a pass of --every does past --lock-timeout:\n%s", recoverHelp)
	}
}

// The recover sweeper's passes are bounded by --lock-timeout too, and a pass that gave up says by
// how much.
func TestRecoverSweeperGivesUpAfterItsLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	holdLocks(t, pool, dbtest.New().OpsLockTasks)
	start := time.Now()
	sweeper := startCLI(t, ctx, "--database-url", url, "recover", "--every", "200ms", "--lock-timeout", "300ms")
	awaitLog(t, &sweeper.stdout, `recover: pass failed: another session held locks it needed .*: gave up on them at --lock-timeout and .*past the lock timeout \(300ms\)`)
	// Its five waits for the tasks table took 25 s at the default bound.
	if took := time.Since(start); took >= 5*defaultLockTimeout {
		t.Errorf("the sweeper's first pass gave up after %s, want about five times 300ms", took)
	}
	if code := sweeper.stop(); code != exitOK || sweeper.stderr.String() != "" {
		t.Errorf("recover --every --lock-timeout 300ms: exit %d, stderr %q", code, sweeper.stderr.String())
	}
}

// A run that could not take its lease did nothing: its error says so, not that it "left what it
// could not lock (what it did is counted)", as a run that left batches says. (3611596 said it, and
// went with its revert.) A run whose release gave up did its work, and left its lease held.
func TestLockWaitOfTheLeaseTakeSaysItDidNothing(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	lease := func(job, step string, bound time.Duration) error {
		err := error(&ratelimit.LockWaitError{Job: job, Step: step + " the " + job + " lease", Bound: bound, Rest: true, Err: timedOut})
		if step == "take" {
			return fmt.Errorf("ratelimit: %s: take the %s lease: %w", job, job, err)
		}
		return fmt.Errorf("ratelimit: %s: release the %s lease: %w", job, job, err)
	}
	batch := fmt.Errorf("ratelimit: prune: counters: %w", &ratelimit.LockWaitError{Job: "prune", Step: "counters", Bound: 5 * time.Second, Rest: true, Err: timedOut})
	const counted = "(what it did is counted)"
	for _, tc := range []struct {
		err        error
		bound      time.Duration // --lock-timeout
		want       string
		countedToo bool
	}{
		{lease("recover", "take", 4*time.Second), 5 * time.Second, "gave up on them at the bound of a run's lease (less than --lock-timeout 5s) and did nothing; run it again", false},
		{lease("prune", "take", 4*time.Second), time.Minute, "gave up on them at the bound of a run's lease (less than --lock-timeout 1m) and did nothing;", false},
		{lease("recover", "take", 300*time.Millisecond), 300 * time.Millisecond, "gave up on them at --lock-timeout and did nothing;", false},
		{lease("recover", "take", 0), 0, "gave up on them after the server's own lock_timeout (--lock-timeout 0 sets none) and did nothing;", false},
		{lease("recover", "release", 4*time.Second), 5 * time.Second, "gave up on them at the bound of a run's lease (less than --lock-timeout 5s) and left the run's lease held " + counted + ";", true},
		{lease("prune", "release", 300*time.Millisecond), 300 * time.Millisecond, "gave up on them at --lock-timeout and left the run's lease held " + counted + ";", true},
		{batch, 5 * time.Second, "gave up on them at --lock-timeout and left what it could not lock " + counted + ";", true},
	} {
		got := lockWaited(tc.err, tc.bound).Error()
		if !strings.Contains(got, tc.want) || strings.Contains(got, counted) != tc.countedToo {
			t.Errorf("--lock-timeout %s: %q does not say %q", tc.bound, got, tc.want)
		}
	}
}

// A run whose release of its lease gave up said "run it again once that session lets go", but a
// new process's run is skipped until the lease expires (its TTL, 15 s by default, after the
// run's last renewal): it now says when. recover --every's next pass takes the lease back (one
// Maintenance for every pass), and tries again whatever the pass left: its log says so, not "run
// it again".
func TestLockWaitOfTheLeaseReleaseSaysWhenToRunAgain(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	wait := func(job, step string) error {
		return fmt.Errorf("ratelimit: %s: %s: %w", job, step, &ratelimit.LockWaitError{Job: job, Step: step, Bound: 4 * time.Second, Rest: true, Err: timedOut})
	}
	const oldAdvice = "; run it again once that session lets go ("
	for _, tc := range []struct {
		err          error
		says, denies string
	}{
		{lockWaited(wait("recover", "release the recover lease"), 5*time.Second),
			"left the run's lease held (what it did is counted); run it again once that session lets go and the lease has expired, at most 15s from now (a run before then is skipped) (", oldAdvice},
		{lockWaited(wait("prune", "release the prune lease"), 5*time.Second), "once that session lets go and the lease has expired, at most 15s from now", oldAdvice},
		// A run that left a batch, and then its lease: both (the batch's wait comes first).
		{lockWaited(errors.Join(wait("prune", "counters"), wait("prune", "release the prune lease")), 5*time.Second),
			"at --lock-timeout, and on its lease at the bound of a run's lease (less than --lock-timeout 5s) and left what it could not lock and the run's lease held (what it did is counted); run it again once that session lets go and the lease has expired, at most 15s from now", oldAdvice},
		{passLockWaited(errors.Join(wait("recover", "reclaim expired tasks"), wait("recover", "release the recover lease")), 5*time.Second),
			"left what it could not lock and the run's lease held (what it did is counted); the next pass takes it back once that session lets go (", "run it again"},
		// A run that took no lease, or left batches, can run again as soon as the lock goes.
		{lockWaited(wait("recover", "take the recover lease"), 5*time.Second), "did nothing" + oldAdvice, "expired"},
		{lockWaited(wait("prune", "counters"), 5*time.Second), "left what it could not lock (what it did is counted)" + oldAdvice, "expired"},
		{passLockWaited(wait("recover", "release the recover lease"), 5*time.Second),
			"left the run's lease held (what it did is counted); the next pass takes it back once that session lets go (", "run it again"},
		{passLockWaited(wait("recover", "take the recover lease"), 5*time.Second), "did nothing; the next pass tries again once that session lets go (", "run it again"},
		{passLockWaited(wait("recover", "reclaim expired tasks"), 4*time.Second), "(what it did is counted); the next pass tries again once that session lets go (", "run it again"},
	} {
		if got := tc.err.Error(); !strings.Contains(got, tc.says) || strings.Contains(got, tc.denies) {
			t.Errorf("%q: want it to say %q, and not %q", got, tc.says, tc.denies)
		}
	}
	// A pass that failed otherwise is told by its own errors, as a run's is.
	if err := passLockWaited(context.DeadlineExceeded, time.Second); err != context.DeadlineExceeded {
		t.Errorf("passLockWaited(context.DeadlineExceeded) = %v, want it unchanged", err)
	}
}
