package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
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

// defaultPassTimeout is recover --every's --pass-timeout when it is not given; a one-shot run
// has no bound unless it is given (a first prune after months of history may rightly take hours).
const defaultPassTimeout = time.Minute

// passTimeoutFlag adds --pass-timeout to recover, prune, doctor and inspect, 0 when not given
// (usage says the default, which depends on recover's --every).
func passTimeoutFlag(fs *flag.FlagSet, usage string) *time.Duration {
	return fs.Duration("pass-timeout", 0, usage)
}

// checkPassTimeout refuses a --pass-timeout given under minDuration, 0 included: a pass cut
// off at once does nothing (no bound is what leaving it out means).
func checkPassTimeout(fs *flag.FlagSet, d *time.Duration) error {
	if flagGiven(fs, "pass-timeout") {
		return checkDuration("pass-timeout", *d)
	}
	return nil
}

// connectPass connects a one-shot recover, prune, doctor or inspect and reads the schema version
// (connectOperator) within the run's --pass-timeout, pctx (passContext of ctx): they came before
// the bound, and a server that stopped answering while the version was read hung the run for
// ever. A cut-off is an error that names the bound, as one of the pass is, and what the run left
// undone (cutOffLeaving; "": nothing said).
func (a *app) connectPass(ctx, pctx context.Context, passTimeout time.Duration, undone string) (*pgxpool.Pool, error) {
	pool, err := a.connectOperator(pctx)
	if err != nil {
		if errors.Is(err, pctx.Err()) { // open's error is ctx's own then, which says nothing more
			err = fmt.Errorf("connecting: %w", err)
		}
		return nil, cutOffLeaving(ctx, pctx, passTimeout, undone, err)
	}
	if err := pctx.Err(); err != nil {
		grace.CloseOnExit(pctx, pool)
		return nil, cutOffLeaving(ctx, pctx, passTimeout, undone, fmt.Errorf("reading the schema version: %w", err))
	}
	return pool, nil
}

// sweep runs Recover every interval until ctx ends, logging each pass. A database it cannot
// reach, at start or later, is logged and tried again at the next interval. lockTimeout is the
// bound that opts give a batch's wait for a lock, for the log of a pass that gave up. metrics, when
// not nil (--http), counts each pass, and each try that could not open the pool, and exports the
// pool once it is open.
func sweep(ctx context.Context, a *app, metrics *sweepMetrics, every, passTimeout, lockTimeout time.Duration, opts ...ratelimit.MaintenanceOption) error {
	cfg, err := a.poolConfig(a.dsn, 2)
	if err != nil {
		return err // a bad URL: no retry will mend it
	}
	// A sweeper whose log cannot be written (a full disk, a reader that went away) stops: it
	// would sweep on unseen, every pass and every failure of one unlogged, and whatever
	// supervises it would see it run. Exit 1 (runApp's outputWriter) tells the supervisor.
	var lost error
	logf := func(format string, args ...any) {
		_, err := fmt.Fprintf(a.stdout, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
		if lost == nil {
			lost = err
		}
	}
	logf("recover: sweeping every %s (stop with Ctrl-C or SIGTERM)", durationtext.Operator(every))
	if lost != nil {
		return lost
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	var pool *pgxpool.Pool
	var o *oneShot                   // pool's: an interrupted pass is waited for endWait at most
	var maint *ratelimit.Maintenance // one for every pass: it takes back a lease a failed pass left
	defer func() {
		if o != nil {
			o.close()
		}
	}()
	for {
		if pool == nil {
			began := time.Now()
			var err error
			if pool, err = a.open(ctx, a.dsn, cfg.Copy()); err != nil && ctx.Err() == nil {
				// A try that cannot connect is a failed run, as metrics.Recover counts one whose
				// Recover cannot: error, or timeout for a server that did not answer in time.
				metrics.observe(ratelimit.RecoveryResult{}, err, time.Since(began))
				logf("recover: %s; trying again in %s", err, durationtext.Operator(every))
			}
			if pool != nil {
				o = &oneShot{pctx: ctx, pool: pool}
				maint = ratelimit.NewMaintenance(pool, opts...)
				if err := metrics.addPool(pool); err != nil {
					a.warn("the pool's metrics are not served: %s", err)
				}
				a.sweepChecks(ctx, o, passTimeout)
			}
		}
		if pool != nil {
			recoverPass(ctx, o, maint, metrics, passTimeout, lockTimeout, logf, a.dsn)
		}
		if lost != nil {
			return lost
		}
		select {
		case <-ctx.Done():
			logf("recover: stopped")
			return nil
		case <-ticker.C:
		}
	}
}

// sweepChecks checks, as the sweeper starts on a new pool (o's), the schema version and the
// connection pooler, warning of what is wrong. They are bounded by passTimeout, as a pass is,
// and waited for endWait at most once that bound or ctx ended (o.within): on a server that
// stopped answering they hung the sweeper, its passes never run. CheckPooler now ends about 1s
// after its context does; o.within stays as the backstop of a check that would not. Given up
// on, they run on in the background, and what they find then is not said.
func (a *app) sweepChecks(ctx context.Context, o *oneShot, passTimeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	returned := o.within(cctx, func() {
		if _, behind := checkOperatorSchema(cctx, o.pool, warn); behind != "" {
			warn("%s", behind)
		}
		// A connection string that does not suit a transaction pooler works while the sweeper
		// has the pooler to itself, and fails once other clients share it: say so now, as
		// doctor does, not months later.
		if err := ratelimit.CheckPooler(cctx, o.pool); errors.Is(err, ratelimit.ErrPoolerMismatch) || errors.Is(err, ratelimit.ErrStatementPooling) {
			warn("%s", scrub(err.Error(), a.dsn))
		}
	})
	if returned {
		for _, w := range warnings {
			a.warn("%s", w)
		}
	}
	if ctx.Err() == nil && cctx.Err() != nil {
		a.warn("the start-up checks (the schema version, the connection pooler) were cut off by --pass-timeout (%s): not checked",
			durationtext.Operator(passTimeout))
	}
}

// recoverPass runs one pass of the sweeper and logs it. A pass that hangs (a server that
// stopped answering, a lock held for ever) must not stop the sweeper: after passTimeout it is
// cut off, and the next pass goes on where it stopped. Interrupted, it is waited for endWait at
// most (o.run), as a one-shot recover is: on a frozen server it took 6-7 s more. metrics counts
// the pass as metrics.Recover counts a run, when it ends.
func recoverPass(ctx context.Context, o *oneShot, maint *ratelimit.Maintenance, metrics *sweepMetrics, passTimeout, lockTimeout time.Duration, logf func(string, ...any), dsn string) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	var res ratelimit.RecoveryResult
	var err error
	if !o.run(func() {
		began := time.Now()
		res, err = maint.Recover(pctx)
		metrics.observe(res, err, time.Since(began))
	}) {
		logf("recover: stopped mid-pass: %s", leaseLeft("the interrupt"))
		return
	}
	line, ok := passReport(res, err, start)
	if ctx.Err() != nil {
		// Stopping: the sweeper says so itself, and the pass did not fail. What it gave back
		// before the signal is still given back, and said.
		if ok && err != nil {
			logf("recover: %s; stopped mid-pass", line)
		} else if ok {
			logf("recover: %s", line)
		}
		return
	}
	if ok {
		logf("recover: %s", line)
	}
	if err != nil {
		err = readOnlyAdvice(privilegeDenied(passLockWaited(notMigrated(pctx, o.pool, err), lockTimeout), "recover", ok))
		logf("recover: pass failed: %s", scrub(cutOff(ctx, pctx, passTimeout, err).Error(), dsn))
	}
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

func pruneCommand() *command {
	return &command{
		name:    "prune",
		args:    "[flags]",
		summary: "delete ended windows, settled reservations and old leases",
		help: `
Runs ratelimit's Prune: releases the reservations still open in windows that ended more than
--older-than ago (on the database's clock; nobody settled them), then deletes what ended before
that cutoff, in bounded batches, each its own short statement: counter windows that ended (never
one an open reservation still draws on), settled reservations and returned Local blocks of such
windows, released or expired leases, and with --events the events of tasks that finished before
the cutoff. Tasks that finished more than --task-retention ago are deleted with their attempts,
events and queue admissions (their reservations and leases stay in the books, without a task).
Live state is never touched, and the books still balance afterwards. Single-flight across
processes, like recover, and like it a batch waits at most --lock-timeout (5s by default; 0: no
bound) for each lock another session holds: that batch is left to a later run (and the rest of
its step, as for recover), the other steps run, what was done is printed, and it exits 1 saying
so. As recover's, its progress says that it still waits while no batch ends, and --pass-timeout
(no bound by default; counted from the run's start, connecting and reading the schema version
included) cuts the run off, exit 1; cut off or interrupted, it waits 2s at most for its
statement's cancel and its lease's release, as recover does.

A request still in flight when prune releases its reservation (a response that streams on past
its window's end by more than --older-than) is not settled: its gateway's Commit reports that
reservation StatusUnknown (once deleted, which the same run does; StatusReleased until then),
without an error, and still releases its leases, but its actual amount is recorded nowhere. The
window is over, so no admission is affected; the ended window's used amount and the overage
report miss it. Choose --older-than longer than the longest request, from its admission to its
Commit or Release, with room to spare (the default 24h, or 1h); seconds only where requests are
that short.`,
		db:  dbRequired,
		run: runPrune,
	}
}

func runPrune(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	olderThan := fs.Duration("older-than", 24*time.Hour, "delete what ended more than this `duration` ago, which must be positive and longer than the longest request (see above)")
	events := fs.Bool("events", false, "also delete the events of tasks that finished before the cutoff")
	taskRetention := fs.Duration("task-retention", ratelimit.DefaultTaskRetention, "delete finished tasks this `duration` after they finished (0 keeps them)")
	batch := fs.Int("batch-size", ratelimit.DefaultPruneBatchSize, "at most `N` rows in one delete statement, 1 to 1000000 (for tasks and --events: tasks, each with all its events)")
	progress := progressFlag(fs, 0, "how far it has got")
	passTimeout := passTimeoutFlag(fs, "cut off a run still going after `duration` (at least 100ms): it prints what it did and exits 1 (default: no bound)")
	lockTimeout := lockTimeoutFlag(fs, pastLeaveBatch)
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return usagef("--older-than must be positive, got %s", durationtext.Operator(*olderThan))
	}
	if *batch < 1 || *batch > 1_000_000 {
		return usagef("--batch-size must be between 1 and 1000000, got %d", *batch)
	}
	if *taskRetention < 0 {
		return usagef("--task-retention must be >= 0, got %s", durationtext.Operator(*taskRetention))
	}
	if err := checkProgress(fs, *progress, false); err != nil {
		return err
	}
	if err := checkPassTimeout(fs, passTimeout); err != nil {
		return err
	}
	if err := checkLockTimeout(*lockTimeout); err != nil {
		return err
	}
	retention := *taskRetention
	if retention == 0 {
		retention = -1 // keep finished tasks
	}
	pctx, cancel := passContext(ctx, *passTimeout)
	defer cancel()
	pool, err := a.connectPass(ctx, pctx, *passTimeout, "")
	if err != nil {
		return err
	}
	o := &oneShot{pctx: pctx, pool: pool} // as recover's
	defer o.close()
	prog := newRunProgress(a.stderr, "prune", *progress, *passTimeout)
	maint := ratelimit.NewMaintenance(pool, ratelimit.WithPruneBatchSize(*batch), ratelimit.WithPruneEvents(*events),
		ratelimit.WithTaskRetention(retention), ratelimit.WithMaintenanceLockTimeout(*lockTimeout), prog.option())
	start := time.Now()
	stopProgress := prog.watch(ctx, pctx)
	var res ratelimit.PruneResult
	returned := o.run(func() { res, err = maint.Prune(pctx, *olderThan) })
	stopProgress()
	if !returned {
		return a.gaveUp(ctx, o, *passTimeout, prog, start, "") // a prune's summary says its cutoff
	}
	// A run that failed before its cutoff was read, or its lease taken, did nothing: its result
	// says so by a zero cutoff, which is not printed (it read 0001-01-01T00:00:00Z).
	counted := err == nil || !res.Cutoff.IsZero()
	// On a schema older than this pgadmit's, steps fail for tables or functions it lacks: a
	// line of zero counts would say that those ran and found nothing. As recover's there, it is
	// printed only when the steps that ran did something; the error says what to run.
	err = notMigrated(pctx, pool, err)
	if sbe := (*schemaBehindError)(nil); errors.As(err, &sbe) && pruneDidNothing(res) {
		counted = false
	}
	if counted { // a step the server rejected: the others still ran, and the line names it
		fmt.Fprintf(a.stdout, "%s (%s)\n", res.Describe(err), time.Since(start).Round(time.Millisecond))
	}
	return cutOff(ctx, pctx, *passTimeout, privilegeDenied(lockWaited(err, *lockTimeout), "prune", counted))
}

// pruneDidNothing reports whether a prune run released and deleted nothing (its cutoffs aside).
func pruneDidNothing(r ratelimit.PruneResult) bool {
	r.Cutoff, r.TaskCutoff = time.Time{}, time.Time{}
	return r == (ratelimit.PruneResult{})
}

// progressFlag adds --progress to a one-shot recover, prune or doctor (and bench), whose usage
// says what its line tells (says: "how far it has got"). Where the command has --every
// (recover's, defined before it), its help says that --every refuses it (checkProgress); where
// it has a floor (bench's and doctor's: checkInterval), its help states it.
func progressFlag(fs *flag.FlagSet, floor time.Duration, says string) *time.Duration {
	values := "0: never"
	if floor > 0 {
		values += "; else at least " + durationtext.Operator(floor)
	}
	usage := "while the run lasts, print " + says + " on stderr every `interval` (" + values + ")"
	if fs.Lookup("every") != nil {
		usage += "; refused with --every, which logs each pass instead"
	}
	return fs.Duration("progress", 10*time.Second, usage)
}

// checkProgress refuses a negative --progress of recover or prune (which take any other value:
// a line of how far the run has got comes only after a batch, and the one that says that it
// still waits for one every minInterval at most: runProgress), and one given to a sweeper,
// whose passes are each logged already. bench's and doctor's have a floor: checkInterval
// refuses what is under it.
func checkProgress(fs *flag.FlagSet, every time.Duration, sweeper bool) error {
	if every < 0 {
		return usagef("--progress must be >= 0, got %s", durationtext.Operator(every))
	}
	if sweeper && flagGiven(fs, "progress") {
		return usagef("--progress is for a single run; with --every each pass is logged")
	}
	return nil
}

func doctorCommand() *command {
	return &command{
		name:    "doctor",
		args:    "[flags]",
		summary: "check that the books balance (exit 1 when they do not)",
		help: `
Runs ratelimit's Doctor, which reads one snapshot and writes nothing: for every counter window,
reserved must equal the sum of its open reservations and open Local blocks, and used the sum of
its committed actual amounts and returned blocks' used amounts; no open reservation or block may
lack its counter; a reservation's status, finalized_at and actual_amount must agree; no block may
stay open well past its window (a dead holder's); no finished task may still hold an open
reservation, a live lease, a queue admission or a running attempt, nor an attempt that is over an
open reservation or a live lease. It also checks the connection: when it goes through a
transaction-pooling proxy (PgBouncer, pool_mode = transaction) while pgx's exec mode needs
session state (cache_statement, the default, or describe_exec), it says what to add to the
connection string. Prints what is wrong and exits 1 when anything is. Full scans of the counters,
reservations and blocks: an operator's tool. A table that another session holds locked (a
migration that alters it) is waited for at most --lock-timeout (5s by default; 0: no bound;
lock_timeout, for doctor's transaction only); then doctor fails, exit 1, and says so. While the
check runs, every --progress (10s by default, at least 100ms; 0: never) it says on stderr that it
is still checking (the connection, then the books), for how long, and when --pass-timeout cuts
it off (or that none does).

A server that stopped answering (its host froze, the network drops packets) is not there to
apply lock_timeout: doctor would wait until Ctrl-C. --pass-timeout cuts the run off (no bound by
default, as a check of a large database may rightly take long; give one to a doctor that cron or
a script runs; counted from its start, connecting and reading the schema version included): it
says what it did not check and exits 1. Cut off or interrupted, it ends within about 2s on a
server that does not answer (its statement's cancel, then its connections' close, 1s each).

--json FILE (- for stdout, the text then going to stderr) also writes the report as one JSON
document, for a script: "ok", "books_checked", "schema_version", "checked_at", "duration_s",
"problems" (each with its "kind", "recoverable", scope, metric, window, task, row and attempt,
and the "expected" and "actual" amounts as JSON numbers with every digit the database holds),
"truncated", "recoverable" and "pooler" (null, or what the connection's check found). The exit
codes are unchanged. It is written when the books were checked, or the connection's check
stopped doctor before them ("books_checked": false); a run that could not check (the database
unreachable or refusing it, cut off, interrupted) writes none, and removes a FILE it created: a
script tells problems found (a document, "ok": false) from a check that did not run (none).`,
		db:  dbRequired,
		run: runDoctor,
	}
}

func runDoctor(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	progress := progressFlag(fs, minInterval, "that it is still checking, and when --pass-timeout cuts it off,")
	lockTimeout := lockTimeoutFlag(fs, pastGiveUp)
	passTimeout := passTimeoutFlag(fs, "cut off a run still going after `duration` (at least 100ms): it says what it did not check and exits 1 (default: no bound)")
	jsonPath := jsonFlag(fs, "report")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if err := checkInterval("progress", *progress, "never"); err != nil { // negative ones too
		return err
	}
	if err := checkLockTimeout(*lockTimeout); err != nil {
		return err
	}
	if err := checkPassTimeout(fs, passTimeout); err != nil {
		return err
	}
	report, err := openJSONFlag(fs, *jsonPath)
	if err != nil {
		return err
	}
	defer report.abandon()
	out := report.textOut(a.stdout, a.stderr)
	start := time.Now()
	// Bounded as a one-shot recover is (connectPass): on a server that stopped answering, no
	// lock_timeout ends a wait, and doctor hung until Ctrl-C. Its statement cut off there is
	// given up 1s after its cancel request, and the pool's close waits 1s at most (pctx ended).
	pctx, cancel := passContext(ctx, *passTimeout)
	defer cancel()
	const unchecked = "the connection and the books were not checked"
	pool, err := a.connectPass(ctx, pctx, *passTimeout, unchecked)
	if err != nil {
		return err
	}
	// CheckPooler ends about 1s after pctx on a server that stopped answering; should it not, it
	// is waited for endWait at most once pctx ended, and left to run on (as sweepChecks).
	o := &oneShot{pctx: pctx, pool: pool}
	defer o.close()
	books, stopProgress := doctorProgress(ctx, pctx, a.stderr, *progress, *passTimeout)
	defer stopProgress() // before o.close: nothing is said after the run's error
	var perr error
	if !o.run(func() { perr = ratelimit.CheckPooler(pctx, pool) }) {
		return cutOffLeaving(ctx, pctx, *passTimeout, unchecked, fmt.Errorf("checking the connection pooler: %w", pctx.Err()))
	}
	doc := doctorReport{SchemaVersion: a.schemaVersion, Problems: []doctorProblemJSON{}}
	if err := perr; err != nil {
		var unfit *exitError
		switch {
		case errors.Is(err, ratelimit.ErrPoolerUnknown):
			// Said, not failed: a pooler in session mode always looks so.
		case errors.Is(err, ratelimit.ErrStatementPooling):
			unfit = &exitError{code: exitFailure, msg: "the connection pooler's mode does not suit pgadmit"}
		case errors.Is(err, ratelimit.ErrPoolerMismatch):
			unfit = &exitError{code: exitFailure, msg: "the connection string does not suit the connection pooler"}
		default:
			return cutOffLeaving(ctx, pctx, *passTimeout, unchecked, err)
		}
		said := scrub(err.Error(), a.dsn)
		fmt.Fprintf(out, "doctor: connection: %s\n", said)
		doc.Pooler = &doctorPoolerJSON{Kind: poolerKind(err), Message: said}
		if unfit != nil { // the books are not checked: the document says so, with the pooler's advice
			stopProgress()
			doc.DurationSeconds = time.Since(start).Seconds()
			if err := report.write(a.stdout, doc); err != nil {
				return err
			}
			return unfit
		}
	}
	books()
	rep, err := ratelimit.NewMaintenance(pool, ratelimit.WithDoctorLockTimeout(*lockTimeout)).Doctor(pctx)
	stopProgress()
	if err != nil {
		return cutOffLeaving(ctx, pctx, *passTimeout, "the books were not checked",
			privilegeDenied(lockTimedOut(notMigrated(pctx, pool, err), *lockTimeout), "doctor", false))
	}
	failed := printDoctor(out, rep)
	doctorJSON(&doc, rep)
	doc.DurationSeconds = time.Since(start).Seconds()
	if err := report.write(a.stdout, doc); err != nil {
		return err
	}
	return failed
}

// printDoctor prints a doctor report on out and turns problems into exit code 1.
func printDoctor(out io.Writer, rep ratelimit.Report) error {
	fmt.Fprintln(out, rep.String())
	if rep.OK() {
		return nil
	}
	recoverable := 0
	for _, p := range rep.Problems {
		if p.Kind.Recoverable() {
			recoverable++
		}
	}
	if recoverable > 0 {
		fmt.Fprintf(out, "%d of these are capacity that finished tasks or attempts, or dead holders of blocks, still hold: `pgadmit recover` gives it back.\n", recoverable)
	}
	more := ""
	if rep.Truncated {
		more = " or more"
	}
	return &exitError{code: exitFailure, msg: fmt.Sprintf("%d%s problem(s) found", len(rep.Problems), more)}
}
