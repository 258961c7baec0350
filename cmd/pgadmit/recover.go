package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func recoverCommand() *command {
	return &command{
		name:    "recover",
		args:    "[flags]",
		summary: "give back the capacity that dead gateway processes hold",
		help: `
Runs ratelimit's Recover: running tasks whose execution lease expired are reclaimed (their open
reservations released, their leases released, their running attempt failed; a sync task fails
with server_restarted, an async task is requeued, or failed for good with
requeue_limit_exceeded once requeued --max-requeues times); open reservations, live leases,
running attempts and queue admissions of finished tasks are released; expired leases are marked
released; blocks of Local limits whose window ended, and whose holder stopped reporting, more
than 5s ago are returned, charging the holder's last report. It works in bounded batches of
short transactions and is single-flight across processes (a lease row, no session state: it
works through PgBouncer in transaction pooling mode): when another process is recovering, a
pass is skipped. A batch waits at most --lock-timeout (5s by default; 0: no bound) for each
lock another session holds (a counter row that a transaction left idle in transaction keeps
locked, or a table a migration alters, say; lock_timeout is set in the batch's own transaction,
before the server parses its statement, and bounds each wait for a lock, so a batch that waits
for several in turn can take several times that): past it, that batch is left whole to a later
pass (one that releases reservations or reclaims tasks is tried once more without the rows
whose counter is still held, and leaves only those; and the rest of its step, after a second
such batch in the step or when the step is one statement), the other steps run, what was done
is printed, and the command says what it left, exit 1 (with --every, the pass is logged as
failed, after its counts, and the sweeper goes on).

Without --every: one pass, then prints its counts. While it runs, every --progress it says on
stderr how far it has got, after a batch, or, while no batch ends, that it still waits for the
database: a lock held with --lock-timeout 0, or a server that stopped answering, which no
lock_timeout ends (the server is not there to apply it), and when --pass-timeout cuts it off
(or that none does). --pass-timeout cuts the run off (no bound by default; counted from its
start, connecting and reading the schema version included): what it did is printed, and it
exits 1 naming the bound. Cut off or interrupted, it waits 2s at most for its statement's cancel
and the release of its single-flight lease, which a live server answers in milliseconds: on one
that does not, it exits without them, saying that the lease may stay held until it expires (15s
at most; a run before then is skipped).

With --every (at least 100ms): a sweeper that runs a pass at that interval and logs each pass's
counts until SIGINT or SIGTERM, then exits 0; a pass in flight then is waited for 2s at most,
as a single run is, and logged, with the lease it may leave held. A failed pass is logged and
retried at the next interval. A log line it cannot write (a full disk, a reader that went away)
stops it at once, exit 1: it does not sweep on unseen. At start-up it checks the connection as
doctor does, and warns when it goes through a transaction-pooling proxy in an exec mode that
needs session state (it says what to add to the connection string); these checks, and that of
the schema version, are bounded by --pass-timeout as a pass is, and past it skipped with a
warning.

With --every and --http ADDR (HOST:PORT; :PORT listens on every interface), it serves Prometheus
metrics at http://ADDR/metrics while it sweeps, and says on stderr where: package promadmit's,
each pass counted as metrics.Recover counts a run (pgadmit_db_operations_total and
pgadmit_db_operation_duration_seconds, operation "recover", by result: ok, skipped when another
process was recovering, error, timeout, ...; what it gave back in pgadmit_recovered_total), and
so is each try to connect that fails while it cannot open its pool (the database unreachable at
start-up): a run that gave nothing back, error, or timeout when the server did not answer within
the connect timeout, so that an alert on the error rate sees a sweeper stuck there; its pool's
(pgadmit_pool_*) and pgadmit_build_info. An ADDR it cannot bind (another process listens
there) fails at once, exit 1, before any pass; the server closes as the sweeper stops. --http
without --every is a usage error: a single pass ends before anything could read its metrics.`,
		db:  dbRequired,
		run: runRecover,
	}
}

func runRecover(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	every := fs.Duration("every", 0, "run as a sweeper: one pass every `interval` (e.g. 30s; at least "+minInterval.String()+") until interrupted")
	passTimeout := passTimeoutFlag(fs, "cut off a pass still running after `duration` (at least 100ms): with --every it is logged as failed and the sweeper "+
		"goes on (default "+durationtext.Operator(defaultPassTimeout)+"); a single pass, unbounded unless given, prints what it did and exits 1")
	batch := fs.Int("batch-size", ratelimit.DefaultRecoveryBatchSize, "at most `N` rows in one recovery transaction, 1 to 1000000")
	maxRequeues := fs.Int("max-requeues", ratelimit.DefaultMaxRequeues, "requeue an async task `N` times before recovery fails it for good; N must be >= 0 (0: fail it at its lease's first expiry)")
	progress := progressFlag(fs, 0, "how far it has got")
	lockTimeout := lockTimeoutFlag(fs, pastLeaveBatchOrSweepOn)
	httpAddr := fs.String("http", "", "with --every: serve Prometheus metrics of the passes and of the pool at http://`ADDR`/metrics "+
		"(HOST:PORT; :PORT listens on every interface, port 0 on a free one); an ADDR it cannot bind fails at once, exit 1")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if err := checkInterval("every", *every, "a single pass"); err != nil {
		return err
	}
	if err := checkPassTimeout(fs, passTimeout); err != nil {
		return err
	}
	if *every > 0 && !flagGiven(fs, "pass-timeout") {
		*passTimeout = defaultPassTimeout
	}
	if *batch < 1 || *batch > 1_000_000 {
		return usagef("--batch-size must be between 1 and 1000000, got %d", *batch)
	}
	if *maxRequeues < 0 {
		return usagef("--max-requeues must be >= 0, got %d", *maxRequeues)
	}
	if err := checkLockTimeout(*lockTimeout); err != nil {
		return err
	}
	if err := checkProgress(fs, *progress, *every > 0); err != nil {
		return err
	}
	serveMetrics := flagGiven(fs, "http")
	if serveMetrics && *every == 0 {
		return usagef("--http needs --every: a single pass ends before anything could read its metrics")
	}
	if serveMetrics {
		if err := checkListenAddr(*httpAddr); err != nil {
			return err
		}
	}

	if *every > 0 {
		var metrics *sweepMetrics // nil: none served
		if serveMetrics {
			// Bound before the sweeper starts: an address taken fails the command at once, not
			// a sweeper that runs unseen.
			if metrics, err = a.serveSweepMetrics(*httpAddr); err != nil {
				return err
			}
			defer metrics.close() // after the sweeper's last pass and its "stopped"
		}
		return sweep(ctx, a, metrics, *every, *passTimeout, *lockTimeout, ratelimit.WithRecoveryBatchSize(*batch), ratelimit.WithMaxRequeues(*maxRequeues),
			ratelimit.WithMaintenanceLockTimeout(*lockTimeout))
	}
	pctx, cancel := passContext(ctx, *passTimeout)
	defer cancel()
	pool, err := a.connectPass(ctx, pctx, *passTimeout, "")
	if err != nil {
		return err
	}
	// A pass cut off on a frozen server leaves a connection that pgx closes once its cancel
	// request gives up, up to 15 s: the pool is not waited for then, as after Ctrl-C.
	o := &oneShot{pctx: pctx, pool: pool}
	defer o.close()
	prog := newRunProgress(a.stderr, "recover", *progress, *passTimeout)
	maint := ratelimit.NewMaintenance(pool, ratelimit.WithRecoveryBatchSize(*batch), ratelimit.WithMaxRequeues(*maxRequeues),
		ratelimit.WithMaintenanceLockTimeout(*lockTimeout), prog.option())
	start := time.Now()
	stopProgress := prog.watch(ctx, pctx)
	var res ratelimit.RecoveryResult
	returned := o.run(func() { res, err = maint.Recover(pctx) })
	stopProgress()
	if !returned {
		return a.gaveUp(ctx, o, *passTimeout, prog, start, ratelimit.RecoveryResult{}.String())
	}
	line, counted := passReport(res, err, start)
	if counted {
		fmt.Fprintln(a.stdout, line)
	}
	return cutOff(ctx, pctx, *passTimeout, privilegeDenied(lockWaited(notMigrated(pctx, pool, err), *lockTimeout), "recover", counted))
}

// passReport says what a Recover pass that began at start did, and whether to say it: a pass
// that failed having done nothing is told by its error alone, but a partly rejected pass still
// did the rest.
func passReport(res ratelimit.RecoveryResult, err error, start time.Time) (string, bool) {
	return fmt.Sprintf("%s (%s)", describeRecovery(res, err), time.Since(start).Round(time.Millisecond)), err == nil || !res.Zero()
}

// describeRecovery says what a Recover pass that returned r and err did, in a line: its
// result's Describe, which names the steps that failed and says how many did not run, unless it
// was skipped or did nothing.
func describeRecovery(r ratelimit.RecoveryResult, err error) string {
	switch {
	case r.Skipped:
		return "skipped: another process is recovering"
	case r.Zero():
		return "nothing to recover"
	}
	return r.Describe(err)
}
