package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/ratelimit"
)

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
unreachable or refusing it, cut off, interrupted) writes none, and removes a FILE it created or
an earlier run wrote (a regular file, or the one a symlink leads to; not a device, a pipe, nor
the shell's file behind /dev/stdout): a script tells
problems found (a document, "ok": false) from a check that did not run (none).`,
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
		fmt.Fprintf(out, "%d of these %s capacity that finished tasks or attempts, or dead holders of blocks, still hold: `pgadmit recover` gives it back.\n",
			recoverable, plural.Noun(recoverable, "is", "are"))
	}
	more := ""
	if rep.Truncated {
		more = " or more"
	}
	return &exitError{code: exitFailure, msg: fmt.Sprintf("%d%s %s found", len(rep.Problems), more, plural.Noun(len(rep.Problems), "problem", "problems"))}
}
