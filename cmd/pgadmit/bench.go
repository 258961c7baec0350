package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
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
p99 latency of one operation in microseconds, admitted, refused and errors.

` + list.String() + `
W1, W2 and W3 run for --duration; W4 (each part) and W5 run for 2 s. An operation is one
Reserve and, where the workload says so, its Commit. Every run uses fresh scope keys (a random
run id), so runs never disturb each other or other data. The database is migrated first.

Exits 1 when a W4 count is not exact, W5 saw a deadlock, or any operation failed.`,
		db:  dbOptional,
		run: runBench,
	}
}

// benchReport is the --json document.
type benchReport struct {
	RunID           string         `json:"run_id"`
	Workers         int            `json:"workers"`
	DurationSeconds float64        `json:"duration_s"`
	ServerVersion   string         `json:"server_version"`
	OK              bool           `json:"ok"`
	Results         []bench.Result `json:"results"`
}

func runBench(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	workers := fs.Int("workers", bench.DefaultWorkers, "concurrent `workers`, each with its own connection")
	duration := fs.Duration("duration", bench.DefaultDuration, "how long W1, W2 and W3 each run")
	only := fs.String("only", "", "run only these workloads, a comma-separated `list` such as W1,W4")
	jsonPath := fs.String("json", "", "also write the results as JSON to this `file` (- for stdout; the table then goes to stderr)")
	combining := fs.Bool("combining", true, "combine concurrent calls into one statement (ratelimit.WithCombining); false sends each alone")
	inFlight := fs.Int("in-flight", ratelimit.DefaultCombineInFlight, "combined statements of one kind in flight at once, 1 to 64")
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
	if *duration <= 0 || *duration > time.Hour {
		return usagef("--duration must be positive and at most 1h, got %s", *duration)
	}
	if *inFlight < 1 || *inFlight > 64 {
		return usagef("--in-flight must be between 1 and 64, got %d", *inFlight)
	}
	codes, err := bench.ParseOnly(*only)
	if err != nil {
		return usagef("--only: %v", err)
	}
	out := a.stdout
	if *jsonPath == "-" {
		out = a.stderr
	}

	dsn, stop, err := a.database(ctx)
	if err != nil {
		return err
	}
	defer stop()
	pool, err := a.connect(ctx, dsn, int32(*workers)+2)
	if err != nil {
		return err
	}
	defer pool.Close()
	version, err := a.migrate(ctx, pool)
	if err != nil {
		return err
	}
	serverVersion := ""
	if c, err := pool.Acquire(ctx); err == nil {
		serverVersion = c.Conn().PgConn().ParameterStatus("server_version")
		c.Release()
	}

	cfg := bench.Config{Workers: *workers, Duration: *duration, Only: codes, RunID: bench.NewRunID(),
		Options: []ratelimit.Option{ratelimit.WithCombining(ratelimit.DefaultCombineBatch, *inFlight)}}
	if !*combining {
		cfg.Options = []ratelimit.Option{ratelimit.WithoutCombining()}
	}
	fmt.Fprintf(out, "pgadmit bench: run %s, %d workers, %s per workload (W4, W5: %ds), PostgreSQL %s, schema version %d\n\n",
		cfg.RunID, cfg.Workers, cfg.Duration, bench.ExactnessSeconds, serverVersion, version)
	fmt.Fprintf(out, "%-22s %9s %8s %8s %9s %8s %7s\n", "WORKLOAD", "OPS/S", "P50 µs", "P99 µs", "ADMITTED", "REFUSED", "ERRORS")
	results, err := bench.Run(ctx, pool, cfg, func(r bench.Result) {
		fmt.Fprintf(out, "%-22s %9.0f %8d %8d %9d %8d %7d", r.Name, r.OpsPerS, r.P50us, r.P99us, r.Admitted, r.Rejected, r.Errors)
		if r.ReservesPerStatement > 0 {
			fmt.Fprintf(out, "  (combined: %.1f reserves, %.1f settles per statement)", r.ReservesPerStatement, r.SettlesPerStatement)
		}
		fmt.Fprintln(out)
	})
	if err != nil {
		return err
	}

	ok := printBenchChecks(out, results)
	if *jsonPath != "" {
		rep := benchReport{RunID: cfg.RunID, Workers: cfg.Workers, DurationSeconds: cfg.Duration.Seconds(),
			ServerVersion: serverVersion, OK: ok, Results: results}
		if err := writeJSON(*jsonPath, a.stdout, rep); err != nil {
			return err
		}
	}
	if !ok {
		return &exitError{code: exitFailure, msg: "some checks failed (see above)"}
	}
	return nil
}

// printBenchChecks prints the exactness checks and any errors under the table, and reports
// whether everything passed.
func printBenchChecks(w io.Writer, results []bench.Result) bool {
	ok := true
	fmt.Fprintln(w)
	for _, r := range results {
		for _, c := range r.Checks {
			verdict := "ok"
			if !c.OK {
				verdict = "OFF"
			}
			fmt.Fprintf(w, "%s: %s: %d (want %d) %s\n", r.Code(), c.Name, c.Got, c.Want, verdict)
		}
		if r.Errors > 0 {
			fmt.Fprintf(w, "%s: %d errors, first: %s\n", r.Code(), r.Errors, r.FirstError)
		}
		ok = ok && r.OK
	}
	if ok {
		fmt.Fprintln(w, "all checks passed, no errors")
	}
	return ok
}

// writeJSON writes v as indented JSON to path, or to stdout when path is "-".
func writeJSON(path string, stdout io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err := stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	return nil
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
