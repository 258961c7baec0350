package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/textcell"
)

func inspectCommand() *command {
	return &command{
		name:    "inspect",
		args:    "[flags]",
		summary: "show current windows, live leases, queue admissions and allotments",
		help: `
Prints four tables, read in one snapshot (a READ ONLY REPEATABLE READ transaction: their
totals agree with each other under traffic; no locks, safe on a busy database, works behind a
transaction pooler):

  WINDOWS             counters of windows that have not ended: used, reserved, limit, free
                      and the time until the window resets (on the database's clock)
  CONCURRENCY LEASES  unreleased leases per scope: live slots, leases that expired without
                      being released (recover gives those back), limit, next expiry
  QUEUE ADMISSIONS    admitted tasks per queue scope, by task status, with the limit
  ALLOTMENTS          open blocks of Local limits per holder and window: units granted, units
                      admitted as the holder last reported and when, and the time until they
                      end (or since they ended, when their holder did not return them)

--scope narrows every table to one scope, given as inspect shows it: TYPE:KEY, a part that
begins with a quote Go-quoted ("tier:gold":"team a"), any other the text itself. A table that
another session holds locked (a migration that alters it) is waited for at most --lock-timeout
(5s by default; 0: no bound; lock_timeout, for inspect's transaction only); then inspect fails,
exit 1, and says so.

A server that stopped answering (its host froze, the network drops packets) is not there to
apply lock_timeout: inspect would wait until Ctrl-C. --pass-timeout cuts the run off (no bound
by default, as for doctor; give one to an inspect that a script runs; counted from its start,
connecting and reading the schema version included): it says that no table was shown (they are
printed once all four are read) and exits 1. Cut off or interrupted, it ends within about 2s on a
server that does not answer (its statement's cancel, then its connections' close, 1s each).

--json FILE (- for stdout, the tables' text then going to stderr) also writes the four tables as
one JSON document, for a script: "windows", "leases", "admissions" and "allotments", arrays of
objects whose amounts are JSON numbers with every digit the database holds and whose durations
are in seconds ("reset_in_s", "next_expiry_in_s", null with no live lease, "oldest_age_s",
"reported_ago_s", "ends_in_s", negative once the window ended), with "totals" (each table's
rows, past --limit too), "scope", "limit", "schema_version" and "duration_s". It is written once
all four tables are read, as the text is: a run that fails writes none, and removes a FILE it
created or an earlier run wrote, as doctor does.`,
		db:  dbRequired,
		run: runInspect,
	}
}

// afterInspectRead, when not nil, is called after each of inspect's reads with the table it read
// ("windows", "leases", "admissions", "allotments"): a test writes between them.
var afterInspectRead func(table string)

func inspectRead(table string) {
	if afterInspectRead != nil {
		afterInspectRead(table)
	}
}

func runInspect(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	scope := fs.String("scope", "", "show only this scope, `TYPE:KEY` as inspect shows it (e.g. api_key:team-42, \"tier:gold\":\"team a\")")
	limit := fs.Int("limit", 50, "print at most `N` rows per table, 1 to 1000000")
	lockTimeout := lockTimeoutFlag(fs, pastGiveUp)
	passTimeout := passTimeoutFlag(fs, "cut off a run still going after `duration` (at least 100ms): it shows no table and exits 1 (default: no bound)")
	jsonPath := jsonFlag(fs, "tables")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1_000_000 {
		return usagef("--limit must be between 1 and 1000000, got %d", *limit)
	}
	if err := checkLockTimeout(*lockTimeout); err != nil {
		return err
	}
	if err := checkPassTimeout(fs, passTimeout); err != nil {
		return err
	}
	var scopeType, scopeKey pgtype.Text
	// A --scope given empty (an unset shell variable) is refused, not read as "every scope".
	if flagGiven(fs, "scope") {
		typ, key, err := parseScope(*scope)
		if err != nil {
			return err
		}
		scopeType = pgtype.Text{String: typ, Valid: true}
		scopeKey = pgtype.Text{String: key, Valid: true}
	}
	report, err := openJSONFlag(fs, *jsonPath)
	if err != nil {
		return err
	}
	defer report.abandon()
	out := report.textOut(a.stdout, a.stderr)
	start := time.Now()

	// Bounded as doctor is: its tables are printed once all four are read, so a run cut off
	// shows none.
	pctx, cancel := passContext(ctx, *passTimeout)
	defer cancel()
	const unshown = "no table was shown"
	pool, err := a.connectPass(ctx, pctx, *passTimeout, unshown)
	if err != nil {
		return err
	}
	defer grace.CloseOnExit(pctx, pool)
	in, err := readInspect(pctx, pool, scopeType, scopeKey, int32(*limit), *lockTimeout)
	if err != nil {
		return cutOffLeaving(ctx, pctx, *passTimeout, unshown, privilegeDenied(lockTimedOut(notMigrated(pctx, pool, err), *lockTimeout), "inspect", false))
	}
	if err := printInspect(out, in.windows, in.leases, in.admissions); err != nil {
		return err
	}
	if err := printAllotments(out, in.allotments); err != nil {
		return err
	}
	doc := inspectDocument(in)
	doc.SchemaVersion, doc.Limit, doc.DurationSeconds = a.schemaVersion, *limit, time.Since(start).Seconds()
	if scopeType.Valid {
		doc.Scope = &inspectScopeJSON{Type: scopeType.String, Key: scopeKey.String}
	}
	return report.write(a.stdout, doc)
}

// inspection is what inspect shows, read in one snapshot.
type inspection struct {
	windows    []db.InspectWindowsRow
	leases     []db.InspectLeasesRow
	admissions []db.InspectAdmissionsRow
	allotments []db.InspectAllotmentsRow
}

// readInspect reads inspect's four tables in one READ ONLY REPEATABLE READ transaction: one
// snapshot (and one now()), so that their totals agree with each other under traffic, where
// separate statements would each see a later state. It is one transaction and sets nothing on
// the session, so it works behind a transaction pooler; it takes no row lock. It waits at most
// lockTimeout (--lock-timeout; 0 sets none, leaving the server's own) for a table another session
// holds locked.
func readInspect(ctx context.Context, pool *pgxpool.Pool, scopeType, scopeKey pgtype.Text, maxRows int32, lockTimeout time.Duration) (in inspection, err error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return in, fmt.Errorf("begin a read-only transaction: %w", err)
	}
	// Nothing to commit: the transaction only read.
	defer func() { _ = tx.Rollback(ctx) }()
	q := db.New()
	if err := boundLockWaits(ctx, q, tx, lockTimeout); err != nil {
		return in, fmt.Errorf("set jit and lock_timeout: %w", err)
	}
	if in.windows, err = q.InspectWindows(ctx, tx, db.InspectWindowsParams{ScopeType: scopeType, ScopeKey: scopeKey, MaxRows: maxRows}); err != nil {
		return in, fmt.Errorf("read windows: %w", err)
	}
	inspectRead("windows")
	if in.leases, err = q.InspectLeases(ctx, tx, db.InspectLeasesParams{ScopeType: scopeType, ScopeKey: scopeKey, MaxRows: maxRows}); err != nil {
		return in, fmt.Errorf("read leases: %w", err)
	}
	inspectRead("leases")
	if in.admissions, err = q.InspectAdmissions(ctx, tx, db.InspectAdmissionsParams{ScopeType: scopeType, ScopeKey: scopeKey, MaxRows: maxRows}); err != nil {
		return in, fmt.Errorf("read queue admissions: %w", err)
	}
	inspectRead("admissions")
	if in.allotments, err = q.InspectAllotments(ctx, tx, db.InspectAllotmentsParams{ScopeType: scopeType, ScopeKey: scopeKey, MaxRows: maxRows}); err != nil {
		return in, fmt.Errorf("read allotments: %w", err)
	}
	inspectRead("allotments")
	return in, nil
}

// printAllotments writes the ALLOTMENTS table: the blocks Local limits are
// admitted from, per holder and window.
func printAllotments(w io.Writer, rows []db.InspectAllotmentsRow) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "\nALLOTMENTS (open%s)\n", shown(len(rows), total(rows, func(r db.InspectAllotmentsRow) int64 { return r.TotalRows })))
	if len(rows) == 0 {
		fmt.Fprintln(bw, "  none")
		return bw.Flush()
	}
	var t textcell.Table
	t.Row("SCOPE", "METRIC", "WINDOW", "HOLDER", "BLOCKS", "GRANTED", "ADMITTED", "REPORTED", "ENDS IN")
	for _, r := range rows {
		ends := seconds(r.EndsInSeconds)
		if r.EndsInSeconds < 0 { // a block its holder did not return: recover does, after a grace
			ends = "ended " + seconds(-r.EndsInSeconds) + " ago"
		}
		t.Row(textcell.Scope(r.ScopeType, r.ScopeKey), textcell.Show(r.Metric), windowString(int64(r.WindowSeconds)), textcell.Show(r.Holder),
			strconv.FormatInt(r.Blocks, 10), r.Granted, r.Consumed, seconds(r.ReportedAgoSeconds)+" ago", ends)
	}
	_, _ = t.WriteTo(bw) // an error stays in bw, for Flush
	return bw.Flush()
}

// printInspect writes the three inspect tables. Amounts are printed as the queries return them,
// numeric's text: exact, without exponent or trailing zeros (as float64, a window's sum
// 100000000000000.000000001 was printed 100000000000000). Their columns are lined up by
// the width of their text on a terminal (textcell.Table), so that a scope key
// of East Asian wide characters shifts none.
func printInspect(w io.Writer, windows []db.InspectWindowsRow, leases []db.InspectLeasesRow, admissions []db.InspectAdmissionsRow) error {
	bw := bufio.NewWriter(w)

	fmt.Fprintf(bw, "WINDOWS (current%s)\n", shown(len(windows), total(windows, func(r db.InspectWindowsRow) int64 { return r.TotalRows })))
	if len(windows) == 0 {
		fmt.Fprintln(bw, "  none")
	} else {
		var t textcell.Table
		t.Row("SCOPE", "METRIC", "WINDOW", "USED", "RESERVED", "LIMIT", "FREE", "RESET IN")
		for _, r := range windows {
			t.Row(textcell.Scope(r.ScopeType, r.ScopeKey), textcell.Show(r.Metric), windowString(int64(r.WindowSeconds)), r.UsedValue,
				r.ReservedValue, r.LimitValue, r.FreeValue, seconds(r.ResetInSeconds))
		}
		_, _ = t.WriteTo(bw)
	}

	fmt.Fprintf(bw, "\nCONCURRENCY LEASES (unreleased%s)\n", shown(len(leases), total(leases, func(r db.InspectLeasesRow) int64 { return r.TotalRows })))
	if len(leases) == 0 {
		fmt.Fprintln(bw, "  none")
	} else {
		var t textcell.Table
		t.Row("SCOPE", "LIVE", "SLOTS", "LIMIT", "EXPIRED, NOT RELEASED", "NEXT EXPIRY IN")
		for _, r := range leases {
			next := "-"
			if r.LiveLeases > 0 {
				next = seconds(r.NextExpiryInSeconds)
			}
			t.Row(textcell.Scope(r.ScopeType, r.ScopeKey), strconv.FormatInt(r.LiveLeases, 10), r.LiveValue, r.LimitValue,
				strconv.FormatInt(r.ExpiredLeases, 10), next)
		}
		_, _ = t.WriteTo(bw)
	}

	fmt.Fprintf(bw, "\nQUEUE ADMISSIONS (%s)\n", trimParen(shown(len(admissions), total(admissions, func(r db.InspectAdmissionsRow) int64 { return r.TotalRows }))))
	if len(admissions) == 0 {
		fmt.Fprintln(bw, "  none")
	} else {
		var t textcell.Table
		t.Row("SCOPE", "ADMITTED", "LIMIT", "QUEUED", "RUNNING", "FINISHED", "OLDEST")
		for _, r := range admissions {
			t.Row(textcell.Scope(r.ScopeType, r.ScopeKey), strconv.FormatInt(r.Admitted, 10), r.LimitValue,
				strconv.FormatInt(r.Queued, 10), strconv.FormatInt(r.Running, 10), strconv.FormatInt(r.Finished, 10), seconds(r.OldestAgeSeconds))
		}
		_, _ = t.WriteTo(bw)
	}
	return bw.Flush() // the first error of a write, if one failed
}

func total[T any](rows []T, f func(T) int64) int64 {
	if len(rows) == 0 {
		return 0
	}
	return f(rows[0])
}

// shown says how many rows of how many a table shows, when it does not show them all.
func shown(n int, total int64) string {
	if int64(n) < total {
		return fmt.Sprintf(", %d of %d shown; raise --limit for more", n, total)
	}
	return ""
}

func trimParen(s string) string {
	if s == "" {
		return "per scope"
	}
	return "per scope" + s
}

// seconds formats a number of seconds as a duration rounded to the second.
func seconds(s float64) string {
	return durationtext.Operator(time.Duration(s * float64(time.Second)).Round(time.Second))
}

// windowString formats a window length: 60s as 1m, 3600s as 1h, 86400s as 1d.
func windowString(s int64) string {
	switch {
	case s%86400 == 0:
		return fmt.Sprintf("%dd", s/86400)
	case s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}
