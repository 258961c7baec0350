package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

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
