package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func benchCommand() *command {
	var list strings.Builder
	for _, w := range bench.Workloads() {
		fmt.Fprintf(&list, "  %s\n%s", w.Name, wrap(w.Description, 6, 92))
	}
	return &command{
		name:    "bench",
		args:    "[flags]",
		summary: "measure admission throughput and latency; check exactness",
		help: `
Runs the workloads through the ratelimit API, one after the other, each with --workers
concurrent workers (one connection each), and prints for each: operations per second, p50 and
p99 latency of one operation in microseconds, admitted, refused and errors (ops/s and the
latencies count the operations decided, admitted or refused; one that failed counts under
errors only, and an admission whose Commit failed counts as admitted and as an error). A
workload keeps up to 8,388,608 latencies: past that many operations (W8 decides up to a
million a second), its percentiles come from a uniform sample of them.

` + list.String() + `
W1, W2, W3, W6, W7, W8, W9 and T1 run for --duration (W9 for two of its windows, 4 s, at
least); W4 (each part) and W5 run for 2 s. An operation is one Reserve and, where the workload
says so, its Commit; in T1, a task from its creation to its end, seven calls (each call's p50
and p99 follow its row). Every run uses fresh scope keys (a random run id), so runs never
disturb each other's counts or other data. The database is migrated first (where 'pgadmit
migrate up' would refuse, bench refuses the same way, creating nothing). Nothing is deleted:
the rows of its scopes (bench-<run id>-...) stay until 'pgadmit prune' removes them once their
windows ended before its cutoff. A Ctrl-C gives back what the workers hold (the grants of those
in their --think pause, W4's admissions, T1's tasks, which it finishes) and closes the
Limiters, returning their Local blocks, for at most 5s: what a server that does not answer has
not taken back by then stays held until a lease's TTL, its window's end or 'pgadmit recover'
frees it (a warning says so).

T1 runs only when --only names it (--only T1, or W2,T1): a run without --only is ` + defaultWorkloads() + `. Its
tasks are sync tasks of kind bench-<run id>-t1-r<round>, which 'pgadmit prune' deletes once
they finished before its task cutoff. It claims no task: ClaimTask takes the next due async
task of the whole database, another application's too, which a benchmark must not take.

--think D pauses each operation between its Reserve and its Commit (T1: before each of its
three heartbeats), for D on average (drawn from 0 to 2D), as a gateway waits for its upstream
call: combining then batches the calls of workers that arrive on their own, not back to back.
Latencies leave the pause out; ops/s counts it, so raise --workers with it, as a gateway has
many more requests under way than connections (say --workers 128 --think 10ms).

--instances N spreads the workers over N Limiters, as N gateway instances sharing the database
would be (--workers 64 --instances 4: four instances of 16 workers): each combines only its
own workers' calls, and the instances contend with each other on the rows and scopes they
share, as separate processes do. W4's counts must still be exact.

--rounds N repeats the selected workloads N times in the same database, nothing reset in
between (rows "W2 round 3/6"), and ends with each workload's last round's ops/s over its
first's ("W2: last/first 0.93"): does admission slow down as the tables grow?

Where server time goes: when the server has loaded pg_stat_statements (shared_preload_libraries),
bench creates the extension if it is missing and, after the workloads, prints per workload the
--statements statements that took the most server time, those nested in pgadmit's PL/pgSQL
functions too: calls, mean planning and execution µs per call, and times planned. It subtracts
snapshots taken around each workload (nothing is reset) and, when the role may (a superuser),
sets pg_stat_statements.track=all and track_planning=on for its own sessions (a small cost per
statement; --statements 0 measures without it; a connection pooler that refuses them as startup
parameters leaves the server's, top-level only). Otherwise it says why the report is
unavailable. The throwaway cluster preloads pg_stat_statements.

--waits samples, every 10 ms while a workload runs, what the workers' sessions are doing
(pg_stat_activity) and prints per workload how many statements executed at once on average and
what share of their time they ran, wrote or flushed the WAL, waited for another backend's WAL
write or flush, or waited for a lock: whether this server's admissions are bound by its
processors, its disk's flushes, commits queuing behind each other's flushes or a hot row. The
sampling costs about 100 small statements a second on a connection of its own.

--progress D prints on stderr, every D while a workload runs (10s by default, at least 100ms;
0: never), how far it has got: elapsed and total time, operations so far and ops/s over the
last D. A workload shorter than D prints nothing more; stdout and --json are the same with it
as without.

Every workload but W4 (whose admissions stay held) checks its books once it ends: per scope set
(the API keys, the models, the provider model) and metric, the usage its counters gained equals
what its workers committed (a request per limit and, in W2, W6, W7 and T1, 420 tokens per
admission), nothing is left reserved (W7, W8 and W9: once their Limiters are closed and their
blocks returned), and no lease is left held. T1 also reads its tasks back: every one
succeeded, none is left unfinished, holding a queue place or an open reservation, and no
FinishTask released a reservation left uncommitted. A workload any of whose operations failed
is not checked, nor are its scopes after it (what a failed operation left is unknown). Exits 1
when a check fails (a book, a W4 count, a W5 deadlock, a T1 task) or any operation failed.
When every operation of a workload failed to reach the database (the server is down), bench
stops there, after its row, rather than run the others to the same end. Interrupted (Ctrl-C),
it prints the checks of the workloads that finished (their rows came as each ended) and writes
their --json ("interrupted": true, "ok": false, no server time), then says "interrupted" and
exits 1.`,
		db:  dbOptional,
		run: runBench,
	}
}

// benchReport is the --json document.
type benchReport struct {
	RunID           string  `json:"run_id"`
	Workers         int     `json:"workers"`
	Instances       int     `json:"instances"` // Limiters the workers were spread over (--instances)
	DurationSeconds float64 `json:"duration_s"`
	// ThinkSeconds is --think: the mean pause between Reserve and Commit.
	ThinkSeconds  float64 `json:"think_s,omitempty"`
	ServerVersion string  `json:"server_version"`
	OK            bool    `json:"ok"`
	// Interrupted says the run was interrupted (Ctrl-C): Results holds the workloads that
	// finished before, OK is false, and ServerTime is absent.
	Interrupted bool `json:"interrupted,omitempty"`
	// Results holds every round's results, round by round (each says its round).
	Results []bench.Result `json:"results"`
	Rounds  int            `json:"rounds"`
	// Steadiness compares each workload's last round with its first (with --rounds 2 or more).
	Steadiness []bench.Steadiness `json:"steadiness,omitempty"`
	// ServerTime is where server time went (absent with --statements 0).
	ServerTime *serverTimeReport `json:"server_time,omitempty"`
	// Waits is what the workers' statements did, per workload (with --waits).
	Waits []workloadWaitsJSON `json:"waits,omitempty"`
}

// Bounds of bench's flags.
const (
	maxBenchRounds     = 1000
	maxBenchStatements = 100
	// defaultBenchStatements is how many statements the server-time report shows per workload.
	defaultBenchStatements = 10
)

// defaultWorkloads names the workloads a run without --only runs, those not opt-in (T1 is), for
// the help, --only's and the long one: "W1 to W9".
func defaultWorkloads() string {
	var codes []string
	for _, w := range bench.Workloads() {
		if !w.OptIn() {
			codes = append(codes, w.Code)
		}
	}
	return codes[0] + " to " + codes[len(codes)-1]
}

func runBench(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	workers := fs.Int("workers", bench.DefaultWorkers, "`N` concurrent workers, each with its own connection, 1 to 256")
	instances := fs.Int("instances", 1, "spread the workers over `N` Limiters, as N gateway instances sharing the database, 1 to --workers")
	duration := fs.Duration("duration", bench.DefaultDuration, "how long W1, W2, W3, W6, W7, W8, W9 and T1 each run, 100ms to 1h")
	think := fs.Duration("think", 0, "mean pause between Reserve and Commit, as a gateway's upstream call, at most 1m (each drawn from 0 to twice it; latency leaves it out); raise --workers with it")
	only := fs.String("only", "", "run only these workloads, a comma-separated `list` such as W1,W4 (T1 runs only when listed; default "+defaultWorkloads()+")")
	jsonPath := fs.String("json", "", "also write the results as JSON to this `file` (- for stdout; the table then goes to stderr)")
	combining := fs.Bool("combining", true, "combine concurrent calls into one statement (ratelimit.WithCombining); false sends each alone")
	inFlight := fs.Int("in-flight", ratelimit.DefaultCombineInFlight, "`N` combined statements of one kind in flight at once, 1 to 64")
	rounds := fs.Int("rounds", 1, "run the selected workloads `N` times in the same database, 1 to 1000, and compare the last round with the first")
	statements := fs.Int("statements", defaultBenchStatements, "show the `N` statements per workload that took the most server time (pg_stat_statements), 0 to 100; 0: no report")
	waits := fs.Bool("waits", false, "sample the workers' sessions (pg_stat_activity) every 10 ms and show what their statements waited for")
	progress := progressFlag(fs, minInterval, "how far it has got")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile while the workloads run to this `file`, for go tool pprof")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if *workers < 1 || *workers > 256 {
		return usagef("--workers must be between 1 and 256, got %d", *workers)
	}
	if *instances < 1 || *instances > *workers {
		return usagef("--instances must be between 1 and --workers (%d), got %d", *workers, *instances)
	}
	if *duration < minDuration || *duration > time.Hour {
		return usagef("--duration must be between %s and 1h, got %s", minDuration, durationtext.Operator(*duration))
	}
	if *think < 0 || *think > time.Minute {
		return usagef("--think must be between 0 and 1m, got %s", durationtext.Operator(*think))
	}
	if *inFlight < 1 || *inFlight > 64 {
		return usagef("--in-flight must be between 1 and 64, got %d", *inFlight)
	}
	if flagGiven(fs, "in-flight") && !*combining {
		// Without combining there are no combined statements to bound: say so rather than
		// ignore the flag.
		return usagef("--in-flight needs --combining")
	}
	if err := checkInterval("progress", *progress, "never"); err != nil { // negative ones too
		return err
	}
	if *rounds < 1 || *rounds > maxBenchRounds {
		return usagef("--rounds must be between 1 and %d, got %d", maxBenchRounds, *rounds)
	}
	if *statements < 0 || *statements > maxBenchStatements {
		return usagef("--statements must be between 0 and %d, got %d", maxBenchStatements, *statements)
	}
	// Given empty (a script's unset variable), these are refused rather than read as not
	// given: the whole bench would run, or no file be written.
	for _, name := range []string{"only", "json", "cpuprofile"} {
		if flagGiven(fs, name) && strings.TrimSpace(fs.Lookup(name).Value.String()) == "" {
			return usagef("--%s is empty", name)
		}
	}
	codes, err := bench.ParseOnly(*only)
	if err != nil {
		return usagef("--only: %v", err)
	}
	profile, err := createBenchProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer profile.stop()
	report, err := createJSONFile(*jsonPath)
	if err != nil {
		return err
	}
	defer report.abandon()
	out := report.textOut(a.stdout, a.stderr)

	dsn, stop, err := a.database(ctx)
	if err != nil {
		return err
	}
	defer stop()
	// Two pools: a small one to migrate, read settings, take pg_stat_statements snapshots and
	// sample the workers' sessions, and the workers', whose sessions may get tracking settings
	// of their own.
	admin, err := a.connect(ctx, dsn, 3)
	if err != nil {
		return err
	}
	defer grace.CloseOnExit(ctx, admin)
	version, err := a.migrate(ctx, admin)
	if err != nil {
		return err
	}
	server, err := describeServer(ctx, admin)
	if err != nil {
		return err
	}
	var spent *benchServerTime
	if *statements > 0 {
		if spent, err = startServerTime(ctx, admin, *statements); err != nil {
			return err
		}
		defer spent.close()
	}
	poolCfg, err := a.poolConfig(dsn, int32(*workers)+2)
	if err != nil {
		return err
	}
	runID := bench.NewRunID()
	if app := poolCfg.ConnConfig.RuntimeParams["application_name"]; app == "pgadmit "+a.cmd.name {
		// pgadmit's default name, not the URL's: name the workers' sessions after the run, so
		// that --waits samples them, not another run's nor this one's other sessions.
		poolCfg.ConnConfig.RuntimeParams["application_name"] = app + " " + runID
	}
	settings := spent.sessionSettings()
	runtimeParams(poolCfg, settings)
	pool, err := a.open(ctx, dsn, poolCfg)
	if settings != nil && refusedStartupParameter(err) {
		// A connection pooler (PgBouncer) refuses startup parameters it does not know; in
		// transaction pooling it could not keep them on one server session anyway. The workers
		// run with the server's tracking instead, and the report says so.
		spent.refused = "the connection refused it as a startup parameter (a connection pooler?)"
		for k := range settings {
			delete(poolCfg.ConnConfig.RuntimeParams, k)
		}
		pool, err = a.open(ctx, dsn, poolCfg)
	}
	if err != nil {
		return err
	}
	leftHeld := false // bench.Run gave up giving back what its workers held (a frozen server)
	defer func() { grace.ClosePool(pool, leftHeld) }()
	var sampled *benchWaits
	if *waits {
		if sampled, err = startWaits(ctx, admin, poolCfg.ConnConfig.RuntimeParams["application_name"]); err != nil {
			return err
		}
		defer sampled.close()
	}
	// The sampler runs only while the workload does, inside the pg_stat_statements snapshots.
	each := hooks{
		before: []func(context.Context, bench.Workload, int) error{spent.beforeWorkload, sampled.beforeWorkload},
		after:  []func(context.Context, bench.Result) error{sampled.afterWorkload, spent.afterWorkload},
	}

	cfg := bench.Config{Workers: *workers, Instances: *instances, Duration: *duration, Think: *think, Only: codes, RunID: runID, Rounds: *rounds,
		Options:    []ratelimit.Option{ratelimit.WithCombining(ratelimit.DefaultCombineBatch, *inFlight)},
		BeforeEach: each.beforeEach, AfterEach: each.afterEach}
	if *progress > 0 {
		cfg.ProgressEvery, cfg.Progress = *progress, benchProgress(a.stderr, *progress, cfg.Rounds)
	}
	if !*combining {
		cfg.Options = []ratelimit.Option{ratelimit.WithoutCombining()}
	}
	who := benchWho(cfg.Workers, cfg.Instances)
	shape := "" // what else the run does: a think time, rounds
	if cfg.Think > 0 {
		shape = ", think " + durationtext.Operator(cfg.Think)
	}
	if cfg.Rounds > 1 {
		shape += fmt.Sprintf(", %d rounds", cfg.Rounds)
	}
	fmt.Fprintf(out, "pgadmit bench: run %s, %s, %s%s, %s, schema version %d\n\n",
		cfg.RunID, who, benchRunLengths(cfg), shape, server.String(), version)
	fmt.Fprintf(out, "%-24s %9s %8s %8s %9s %8s %7s\n", "WORKLOAD", "OPS/S", "P50 µs", "P99 µs", "ADMITTED", "REFUSED", "ERRORS")
	if err := profile.start(); err != nil {
		return err
	}
	results, err := bench.Run(ctx, pool, cfg, func(r bench.Result) {
		name := inRound(r, cfg.Rounds, r.Name)
		fmt.Fprintf(out, "%-24s %9.0f %8s %8s %9d %8d %7d%s\n", name, r.OpsPerS, micros(r.P50ns), micros(r.P99ns), r.Admitted, r.Rejected, r.Errors, benchRowNotes(r))
	})
	if errors.Is(err, bench.ErrLeftHeld) {
		leftHeld = true
		a.warnLeftHeld()
	}
	// Interrupted (Ctrl-C), the run still reports the workloads that finished, their checks
	// and their JSON, then says it was interrupted and exits 1: an hour's run cut short in its
	// last workload is not lost.
	stopped := err != nil && interrupted(ctx, err)
	if err != nil && !stopped {
		return err
	}
	runErr := err
	if err := profile.stop(); err != nil && !stopped {
		return err
	}

	steady := bench.Steady(results)
	printSteadiness(out, steady)
	var serverTime *serverTimeReport
	if !stopped { // the report reads the server, which an interrupted run no longer asks
		serverTime, err = spent.report(ctx, results)
		if err != nil && interrupted(ctx, err) {
			// Interrupted as it read the server: every workload finished, and is reported
			// as one an interrupt cut short would be, without server time.
			stopped, runErr, serverTime = true, err, nil
		} else if err != nil {
			return err
		}
	}
	printServerTime(out, serverTime)
	waitsReport := sampled.report()
	printWaits(out, waitsReport)
	ok := printBenchChecks(out, results, cfg.Rounds)
	if stopped {
		ok = false
		if len(results) == 0 {
			fmt.Fprintln(out, "interrupted: no workload finished")
		} else {
			fmt.Fprintln(out, "interrupted: the workloads above finished, the others did not")
		}
	}
	if *jsonPath != "" {
		if results == nil {
			results = []bench.Result{} // "results": [], not null
		}
		rep := benchReport{RunID: cfg.RunID, Workers: cfg.Workers, Instances: cfg.Instances, DurationSeconds: cfg.Duration.Seconds(), ThinkSeconds: cfg.Think.Seconds(),
			ServerVersion: server.Version, OK: ok, Interrupted: stopped, Results: results, Rounds: cfg.Rounds, Steadiness: steady,
			ServerTime: serverTime, Waits: waitsReport}
		if err := report.write(a.stdout, rep); err != nil {
			return err
		}
	}
	if stopped {
		return runErr
	}
	if !ok {
		return &exitError{code: exitFailure, msg: "some checks failed (see above)"}
	}
	return nil
}

// benchProgress prints a running workload's progress on stderr, as recover and prune print
// theirs: never on stdout, whose table and JSON scripts read.
func benchProgress(w io.Writer, every time.Duration, rounds int) func(bench.Progress) {
	unit := time.Second
	if every < time.Second {
		unit = time.Millisecond
	}
	return func(p bench.Progress) {
		name := inRound(bench.Result{Name: p.Workload, Round: p.Round}, rounds, p.Workload)
		fmt.Fprintf(w, "pgadmit bench: %s: %s of %s, %d ops so far, %.0f ops/s over the last %s\n",
			name, durationtext.Operator(p.Elapsed.Round(unit)), durationtext.Operator(p.Total), p.Ops, p.OpsPerS, durationtext.Operator(every))
	}
}

// benchWho says in the header who runs the workloads: "1 worker", "16 workers", "16 workers in
// 4 instances" (instances only when more than one).
func benchWho(workers, instances int) string {
	who := plural.Count(workers, "worker", "workers")
	if instances > 1 {
		who += fmt.Sprintf(" in %d instances", instances)
	}
	return who
}

// hooks runs several BeforeEach hooks in order, stopping at the first error, and several
// AfterEach hooks, every one of them whatever the others return (a sampler must stop even when
// a snapshot fails).
type hooks struct {
	before []func(context.Context, bench.Workload, int) error
	after  []func(context.Context, bench.Result) error
}

func (h hooks) beforeEach(ctx context.Context, w bench.Workload, round int) error {
	for _, f := range h.before {
		if err := f(ctx, w, round); err != nil {
			return err
		}
	}
	return nil
}

func (h hooks) afterEach(ctx context.Context, r bench.Result) error {
	var errs []error
	for _, f := range h.after {
		errs = append(errs, f(ctx, r))
	}
	return errors.Join(errs...)
}

// printSteadiness prints, for each workload run more than one round, its last round's ops/s
// over its first's.
func printSteadiness(w io.Writer, steady []bench.Steadiness) {
	if len(steady) == 0 {
		return
	}
	fmt.Fprintln(w, "\nsteadiness (ops/s of the last round over the first, same database, nothing reset):")
	for _, s := range steady {
		fmt.Fprintf(w, "%s: last/first %.2f (round 1: %.0f ops/s, round %d: %.0f ops/s)\n",
			s.Code(), s.LastOverFirst, s.FirstOpsPerS, s.Rounds, s.LastOpsPerS)
	}
}

// printBenchChecks prints the exactness checks and any errors under the table, each under its
// workload's code and, with several rounds, its round, as the table names it, and reports
// whether everything passed.
func printBenchChecks(w io.Writer, results []bench.Result, rounds int) bool {
	ok := true
	fmt.Fprintln(w)
	for _, r := range results {
		name := inRound(r, rounds, r.Code())
		for _, c := range r.Checks {
			verdict := "ok"
			if !c.OK {
				verdict = "OFF"
			}
			want := "want"
			if c.AtMost {
				want = "at most"
			}
			fmt.Fprintf(w, "%s: %s: %d (%s %d) %s\n", name, c.Name, c.Got, want, c.Want, verdict)
		}
		if r.Errors > 0 {
			fmt.Fprintf(w, "%s: %s, first: %s\n", name, plural.Count(r.Errors, "error", "errors"), r.FirstError)
		}
		ok = ok && r.OK
	}
	if ok && len(results) > 0 { // none: interrupted before any workload finished, nothing checked
		fmt.Fprintln(w, "all checks passed, no errors")
	}
	return ok
}

// inRound names r as the table does: by its code and round ("W4 round 2/6") when the run has
// several rounds, else as single.
func inRound(r bench.Result, rounds int, single string) string {
	if rounds > 1 {
		return fmt.Sprintf("%s round %d/%d", r.Code(), r.Round, rounds)
	}
	return single
}

// wrap word-wraps text to lines of at most width columns, each indented by indent spaces.
func wrap(text string, indent, width int) string {
	var b strings.Builder
	pad := strings.Repeat(" ", indent)
	line := pad
	for _, word := range strings.Fields(text) {
		if len(line) > indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = pad
		}
		if len(line) > indent {
			line += " "
		}
		line += word
	}
	if len(line) > indent {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// benchRowNotes is what follows a workload's row: for one whose operations
// are several calls (T1), each call's p50 and p99; for one of Local limits,
// the blocks it took and how many of its Local limits the database decided
// (W8's few in each window's last moments would otherwise read as if W8
// sent statements); then how its calls were combined.
func benchRowNotes(r bench.Result) string {
	var notes []string
	if len(r.Steps) > 0 {
		var steps []string
		for _, s := range r.Steps {
			steps = append(steps, fmt.Sprintf("%s %d/%d", s.Name, s.P50us, s.P99us))
		}
		notes = append(notes, "p50/p99 µs per call: "+strings.Join(steps, ", "))
	}
	if r.LocalBlocks > 0 {
		notes = append(notes, fmt.Sprintf("local: %s taken, %s decided in the database", plural.Count(r.LocalBlocks, "block", "blocks"),
			plural.Count(r.LocalInDatabase, "limit", "limits")))
	}
	if r.ReservesPerStatement > 0 {
		notes = append(notes, fmt.Sprintf("combined: %.1f reserves in %.2f ms, %.1f settles in %.2f ms per statement; busy %.0f%% and %.0f%%; %.0f%% hot",
			r.ReservesPerStatement, r.ReserveStatementUs/1000, r.SettlesPerStatement, r.SettleStatementUs/1000,
			r.ReserveBusyPercent, r.SettleBusyPercent, r.HotPercent))
	}
	if len(notes) == 0 {
		return ""
	}
	return "  (" + strings.Join(notes, "; ") + ")"
}

// micros formats a latency in microseconds: to a tenth below 10 µs (an
// admission from a local allotment takes about one), whole above.
func micros(ns int64) string {
	if ns < 10_000 {
		return strconv.FormatFloat(float64(ns)/1000, 'f', 1, 64)
	}
	return strconv.FormatInt(ns/1000, 10)
}

// benchRunLengths says how long each workload of the run runs: --duration, and the workloads
// that run another length, of those that run (cfg.Only lists them; empty, they all do).
func benchRunLengths(cfg bench.Config) string {
	runs := func(code string) bool { return len(cfg.Only) == 0 || slices.Contains(cfg.Only, code) }
	var fixed, other []string
	for _, code := range []string{"W4", "W5"} {
		if runs(code) {
			fixed = append(fixed, code)
		}
	}
	if len(fixed) > 0 {
		other = append(other, fmt.Sprintf("%s: %ds", strings.Join(fixed, ", "), bench.ExactnessSeconds))
	}
	if runs("W9") && cfg.StrandingDuration() != cfg.Duration {
		other = append(other, "W9: "+durationtext.Operator(cfg.StrandingDuration()))
	}
	s := durationtext.Operator(cfg.Duration) + " per workload"
	if len(other) > 0 {
		s += " (" + strings.Join(other, "; ") + ")"
	}
	return s
}
