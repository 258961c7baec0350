package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/internal/servertime"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

func TestMigrateDownStatusUp(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t) // migrated to the latest version
	latest := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version"))
	if latest == "0" {
		t.Fatalf("migrate version on a migrated database = 0")
	}

	out := cliOK(t, "--database-url", url, "migrate", "status")
	if !regexp.MustCompile(`(?m)^1\s+applied\s+\d{4}-\d\d-\d\d .*00001_init\.sql$`).MatchString(out) {
		t.Errorf("migrate status on a migrated database:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "up"); !strings.Contains(out, "nothing to do") || !strings.Contains(out, "schema version "+latest) {
		t.Errorf("migrate up on a migrated database:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "up", "--to", "3"); !strings.Contains(out, "nothing to do") ||
		!strings.Contains(out, "already past version 3 (to revert to it: pgadmit migrate down --to 3)") {
		t.Errorf("migrate up --to 3 on a migrated database:\n%s", out)
	}

	out = cliOK(t, "--database-url", url, "migrate", "down", "--to", "0")
	if !strings.Contains(out, "down 00001_init.sql") || !strings.Contains(out, "schema version 0") {
		t.Errorf("migrate down --to 0:\n%s", out)
	}
	if v := strings.TrimSpace(cliOK(t, "migrate", "version", "--database-url", url)); v != "0" {
		t.Errorf("migrate version after down = %q, want 0", v)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "status"); !regexp.MustCompile(`(?m)^1\s+pending\s+-\s+00001_init\.sql$`).MatchString(out) {
		t.Errorf("migrate status after down:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "down"); !strings.Contains(out, "nothing to do") {
		t.Errorf("migrate down with nothing applied:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "down", "--to", "2"); !strings.Contains(out, "nothing to do") ||
		!strings.Contains(out, "already below version 2 (to apply up to it: pgadmit migrate up --to 2)") {
		t.Errorf("migrate down --to 2 with nothing applied:\n%s", out)
	}
	if _, errOut, code := cli(t, nil, "--database-url", url, "migrate", "up", "--to", "0"); code != exitUsage || !strings.Contains(errOut, "--to") {
		t.Errorf("migrate up --to 0: exit %d, %q: want a usage error", code, errOut)
	}

	out = cliOK(t, "--database-url", url, "migrate", "up")
	if !strings.Contains(out, "up   00001_init.sql") || !strings.Contains(out, "schema version "+latest) {
		t.Errorf("migrate up:\n%s", out)
	}
	// One step down, as goose does, then up again.
	if out := cliOK(t, "--database-url", url, "migrate", "down"); strings.Count(out, "down ") != 1 {
		t.Errorf("migrate down reverted more or less than one migration:\n%s", out)
	}
	cliOK(t, "--database-url", url, "migrate", "up")
	if v := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")); v != latest {
		t.Errorf("migrate version after up = %q, want %q", v, latest)
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	// Everything below reads back the windows it reserved in, as current ones.
	win := readBackWindow(t, pool)
	wt := windowText(win)

	lim, g := inspectScene(t, pool, win, 500)

	out := cliOK(t, "--database-url", url, "inspect")
	for _, re := range []string{
		`(?m)^api_key:team-42\s+requests\s+` + wt + `\s+0\s+1\s+100\s+99\s+` + leftText + `$`,
		`(?m)^api_key:team-42\s+tokens\s+` + wt + `\s+0\s+500\s+10000\s+9500\s+` + leftText + `$`,
		`(?m)^api_key:other\s+requests\s+` + wt + `\s+0\s+2\s+5\s+3\s+` + leftText + `$`,
		`(?m)^model:large\s+1\s+1\s+8\s+0\s+\d+m(\d+s)?$`,
		`(?m)^queue:team-42\s+2\s+5\s+2\s+0\s+0\s+\d+s$`,
		`(?m)^provider:gpt\s+tokens\s+` + wt + `\s+gw-1\s+1\s+1600\s+100\s+\d+s ago\s+` + leftText + `$`, // a block of 16 requests' worth, one reported
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s:\n%s", re, out)
		}
	}

	out = cliOK(t, "--database-url", url, "inspect", "--scope", "api_key:team-42")
	if !strings.Contains(out, "api_key:team-42") || strings.Contains(out, "api_key:other") || strings.Contains(out, "model:large") {
		t.Errorf("inspect --scope api_key:team-42:\n%s", out)
	}
	out = cliOK(t, "--database-url", url, "inspect", "--limit", "1")
	if !strings.Contains(out, "1 of 4 shown; raise --limit for more") {
		t.Errorf("inspect --limit 1:\n%s", out)
	}

	// Once committed, the window shows usage and the lease is gone.
	if _, err := lim.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	out = cliOK(t, "--database-url", url, "inspect", "--scope", "api_key:team-42")
	if !regexp.MustCompile(`(?m)^api_key:team-42\s+tokens\s+` + wt + `\s+420\s+0\s+10000\s+9580\s`).MatchString(out) {
		t.Errorf("inspect after commit:\n%s", out)
	}
	out = cliOK(t, "--database-url", url, "inspect", "--scope", "model:large")
	if !strings.Contains(out, "CONCURRENCY LEASES (unreleased)\n  none") {
		t.Errorf("inspect after commit still shows the lease:\n%s", out)
	}
}

func TestBench(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	start := time.Now()
	out := cliOK(t, "--database-url", url, "bench", "--workers", "4", "--duration", "200ms", "--json", jsonPath)
	t.Logf("bench took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	// The default run: every workload but those that run only when --only names them (T1).
	var workloads []bench.Workload
	for _, w := range bench.Workloads() {
		if w.OptIn() {
			if strings.Contains(out, w.Name) {
				t.Errorf("bench without --only ran %q", w.Name)
			}
			continue
		}
		workloads = append(workloads, w)
	}
	for _, w := range workloads {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.Name) + `\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+0( |$)`).MatchString(out) {
			t.Errorf("bench output has no row for %q with 0 errors", w.Name)
		}
	}
	if !strings.Contains(out, "all checks passed") {
		t.Errorf("bench checks did not pass")
	}
	// pgtest's servers do not preload pg_stat_statements (the machine's does not either): the
	// report says so.
	preloaded := serverPreloadsStatements(t, url)
	if !preloaded && !strings.Contains(out, "\nserver time per statement: unavailable (pg_stat_statements is not loaded)\n") {
		t.Errorf("bench on a server without pg_stat_statements does not say the report is unavailable")
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		OK         bool `json:"ok"`
		Rounds     int  `json:"rounds"`
		ServerTime *struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"server_time"`
		Steadiness []bench.Steadiness `json:"steadiness"`
		Results    []struct {
			Name     string   `json:"name"`
			OpsPerS  *float64 `json:"ops_per_s"`
			P50      *int64   `json:"p50_us"`
			P99      *int64   `json:"p99_us"`
			P50ns    *int64   `json:"p50_ns"`
			Admitted *int64   `json:"admitted"`
			Rejected *int64   `json:"rejected"`
			Errors   *int64   `json:"errors"`
			Round    int      `json:"round"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, b)
	}
	if want := len(workloads); !rep.OK || len(rep.Results) != want || rep.Rounds != 1 || rep.Steadiness != nil {
		t.Fatalf("bench JSON: ok %v, %d results, %d rounds, steadiness %v; want ok, %d, 1 and none\n%s", rep.OK, len(rep.Results), rep.Rounds, rep.Steadiness, want, b)
	}
	if st := rep.ServerTime; st == nil || st.Available != preloaded || (!preloaded && st.Reason != "pg_stat_statements is not loaded") {
		t.Errorf("bench JSON: server_time %+v", st)
	}
	for i, r := range rep.Results {
		code := workloads[i].Code
		if !strings.HasPrefix(r.Name, code+" ") || r.Round != 1 {
			t.Errorf("result %d is named %q, round %d; want it to start with %q, round 1", i, r.Name, r.Round, code)
		}
		if r.OpsPerS == nil || r.P50 == nil || r.P99 == nil || r.P50ns == nil || r.Admitted == nil || r.Rejected == nil || r.Errors == nil {
			t.Errorf("result %q lacks a field:\n%s", r.Name, b)
			continue
		}
		// p50_us is whole microseconds, p50_ns the same median. W8 admits from memory, with
		// no round trip: on a fast machine its median is below a microsecond, so 0 µs but
		// never 0 ns; every other workload's operation waits for the server.
		minP50 := int64(1)
		if code == "W8" {
			minP50 = 0
		}
		if *r.OpsPerS <= 0 || *r.P50 < minP50 || *r.P99 < *r.P50 || *r.Errors != 0 || *r.P50ns <= 0 || *r.P50ns/1000 != *r.P50 {
			t.Errorf("result %q: ops/s %v, p50 %d µs (%d ns), p99 %d, errors %d", r.Name, *r.OpsPerS, *r.P50, *r.P50ns, *r.P99, *r.Errors)
		}
	}
	if w4 := rep.Results[3]; *w4.Admitted != 110 {
		t.Errorf("W4 admitted %d, want 100 window + 10 concurrent", *w4.Admitted)
	}

	// --only runs a subset, --rounds repeats it; --json - writes JSON to stdout and the table
	// to stderr; --statements 0 leaves the server-time report out.
	stdout, stderr, code := cli(t, nil, "--database-url", url, "bench", "--workers", "2", "--duration", "100ms",
		"--only", "w3,W1", "--rounds", "3", "--statements", "0", "--json", "-")
	if code != exitOK {
		t.Fatalf("bench --only --rounds: exit %d\n%s", code, stderr)
	}
	rep.ServerTime = nil
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Results) != 6 || rep.Rounds != 3 || rep.ServerTime != nil {
		t.Fatalf("bench --only w3,W1 --rounds 3 --statements 0 --json -: %v\n%s", err, stdout)
	}
	for i, r := range rep.Results {
		code, round := []string{"W1", "W3"}[i%2], i/2+1
		if !strings.HasPrefix(r.Name, code+" ") || r.Round != round {
			t.Errorf("result %d: %q round %d, want %s round %d", i, r.Name, r.Round, code, round)
		}
	}
	if len(rep.Steadiness) != 2 || rep.Steadiness[0].Code() != "W1" || rep.Steadiness[1].Rounds != 3 || rep.Steadiness[1].LastOverFirst <= 0 {
		t.Errorf("bench --rounds 3 JSON steadiness: %+v", rep.Steadiness)
	}
	for _, re := range []string{
		`(?m)^W1 round 1/3\s+\d+\s`, `(?m)^W3 round 1/3\s+\d+\s`, `(?m)^W1 round 3/3\s+\d+\s`, `(?m)^W3 round 3/3\s+\d+\s`,
		`(?m)^W1: last/first \d+\.\d\d \(round 1: \d+ ops/s, round 3: \d+ ops/s\)$`,
		`(?m)^W3: last/first \d+\.\d\d `,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("bench --rounds 3 table (on stderr) does not match %s:\n%s", re, stderr)
		}
	}
	if strings.Contains(stderr, "server time per statement") {
		t.Errorf("bench --statements 0 reports server time:\n%s", stderr)
	}
	if strings.Contains(stderr, "where the workers' statements") || strings.Contains(stdout, `"waits"`) {
		t.Errorf("bench without --waits reports waits")
	}
}

// --instances spreads the workers over several Limiters, as several gateway
// instances: each combines only its own workers' calls, and W4's counts stay
// exact across them.
func TestBenchInstances(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var rep struct {
		OK        bool           `json:"ok"`
		Instances int            `json:"instances"`
		Results   []bench.Result `json:"results"`
	}
	benchJSON(t, &rep, ", 4 workers in 2 instances,", "--database-url", url, "bench", "--workers", "4", "--instances", "2",
		"--duration", "200ms", "--only", "W3,W4,W7", "--statements", "0", "--json", "-")
	if len(rep.Results) != 3 {
		t.Fatalf("bench --instances JSON: %d results, want 3", len(rep.Results))
	}
	if !rep.OK || rep.Instances != 2 {
		t.Errorf("bench --instances 2 JSON: ok %v, instances %d", rep.OK, rep.Instances)
	}
	w3, w4, w7 := rep.Results[0], rep.Results[1], rep.Results[2]
	if w3.Admitted == 0 || w3.Errors != 0 || w3.ReservesPerStatement < 1 || w3.SettlesPerStatement < 1 {
		t.Errorf("W3 in 2 instances: %+v", w3)
	}
	// One statement of each kind in flight per instance: each is busy for part
	// of the run, never more than all of it.
	if w3.ReserveStatementUs <= 0 || w3.SettleStatementUs <= 0 ||
		w3.ReserveBusyPercent <= 0 || w3.ReserveBusyPercent > 100 || w3.SettleBusyPercent <= 0 || w3.SettleBusyPercent > 100 {
		t.Errorf("W3 in 2 instances: statements of %.1f and %.1f µs, busy %.1f%% and %.1f%%; want each above 0, busy at most 100%%",
			w3.ReserveStatementUs, w3.SettleStatementUs, w3.ReserveBusyPercent, w3.SettleBusyPercent)
	}
	if w4.Admitted != 110 || !w4.OK {
		t.Errorf("W4 in 2 instances admitted %d (checks %+v), want 100 window + 10 concurrent", w4.Admitted, w4.Checks)
	}
	if w7.Admitted == 0 || w7.Errors != 0 {
		t.Errorf("W7 in 2 instances: %+v", w7)
	}
}

// T1 runs gateway requests as tasks when --only names it: its row says each call's latency,
// its checks pass, and its JSON result lists its steps.
func TestBenchTaskWorkload(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	stdout, stderr, code := cli(t, nil, "--database-url", url, "bench", "--workers", "4", "--duration", "300ms",
		"--only", "t1", "--statements", "0", "--json", "-")
	if code != exitOK {
		t.Fatalf("bench --only t1: exit %d\n%s", code, stderr)
	}
	row := regexp.MustCompile(`(?m)^T1 gateway tasks\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s+0\s+0  \(p50/p99 µs per call: create \d+/\d+, reserve \d+/\d+, heartbeat \d+/\d+, commit \d+/\d+, finish \d+/\d+; combined: `)
	if !row.MatchString(stderr) || !strings.Contains(stderr, "T1: tasks unfinished (queued or running): 0 (want 0) ok\n") ||
		!strings.Contains(stderr, "all checks passed") {
		t.Errorf("bench --only t1: no T1 row with its calls' latencies, or a check off:\n%s", stderr)
	}
	var rep struct {
		OK      bool           `json:"ok"`
		Results []bench.Result `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || !rep.OK || len(rep.Results) != 1 {
		t.Fatalf("bench --only t1 JSON: %v\n%s", err, stdout)
	}
	res := rep.Results[0]
	if res.Name != "T1 gateway tasks" || res.Admitted == 0 || len(res.Steps) != 5 || res.Steps[2].Name != "heartbeat" || res.Steps[2].Calls != 3*res.Admitted {
		t.Errorf("bench --only t1 JSON result: %+v", res)
	}
}

// benchJSON runs the CLI with args (a bench writing its JSON to stdout), requires it to
// succeed with header in its table (on stderr), and decodes the JSON into rep.
func benchJSON(t *testing.T, rep any, header string, args ...string) {
	t.Helper()
	stdout, stderr, code := cli(t, nil, args...)
	if code != exitOK {
		t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), code, stderr)
	}
	if !strings.Contains(stderr, header) {
		t.Errorf("%s: the table's header does not contain %q:\n%s", strings.Join(args, " "), header, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), rep); err != nil {
		t.Fatalf("%s: JSON: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}

// serverPreloadsStatements reports whether url's server has pg_stat_statements loaded.
func serverPreloadsStatements(t *testing.T, url string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	p, err := db.New().BenchStatementStatsProbe(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return p.Loaded
}

// --cpuprofile writes the client's CPU profile while the workloads run: a
// gzipped protobuf, as go tool pprof reads it.
func TestBenchCPUProfile(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	path := filepath.Join(t.TempDir(), "cpu.prof")
	_, stderr, code := cli(t, nil, "--database-url", url, "bench", "--workers", "4", "--duration", "300ms",
		"--only", "W1", "--statements", "0", "--cpuprofile", path)
	if code != exitOK {
		t.Fatalf("bench --cpuprofile: exit %d\n%s", code, stderr)
	}
	prof, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof) < 64 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Errorf("bench --cpuprofile wrote %d bytes, want a gzipped profile", len(prof))
	}
}

// --think pauses each operation between Reserve and Commit: a worker admits
// at most one operation per pause, and the latencies leave the pause out.
func TestBenchThink(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	// Pauses far longer than an operation, even on a loaded machine (under coverage, with the
	// whole suite running, a W1 operation has taken 25 ms; with the CPU hogged, a p50 of 59 ms):
	// the latency with them left out stays well below them.
	const workers, think = 4, 400 * time.Millisecond
	var rep struct {
		ThinkSeconds float64        `json:"think_s"`
		Results      []bench.Result `json:"results"`
	}
	benchJSON(t, &rep, ", think 400ms,", "--database-url", url, "bench", "--workers", strconv.Itoa(workers), "--duration", "3s",
		"--think", think.String(), "--only", "W1", "--statements", "0", "--json", "-")
	if len(rep.Results) != 1 {
		t.Fatalf("bench --think JSON: %d results, want 1", len(rep.Results))
	}
	w1 := rep.Results[0]
	t.Logf("W1 with %s think: %.0f ops/s, p50 %d µs", think, w1.OpsPerS, w1.P50us)
	if rep.ThinkSeconds != think.Seconds() {
		t.Errorf("think_s = %v, want %v", rep.ThinkSeconds, think.Seconds())
	}
	// Pauses average 400 ms, so 4 workers admit about 10 operations a second; back to back
	// they admit hundreds or thousands.
	if maxOps := 1.5 * workers / think.Seconds(); w1.OpsPerS <= 0 || w1.OpsPerS > maxOps {
		t.Errorf("W1 ran %.0f ops/s; with pauses of %s on average it cannot pass %.0f", w1.OpsPerS, think, maxOps)
	}
	// Half the pauses are longer than 400 ms: a median with them in would be too.
	if w1.P50us <= 0 || time.Duration(w1.P50us)*time.Microsecond >= think/2 {
		t.Errorf("W1 p50 %d µs: the pause is not left out of the latency", w1.P50us)
	}
	if w1.Admitted != w1.Ops || w1.Errors != 0 {
		t.Errorf("W1: %d ops, %d admitted, %d errors (%s)", w1.Ops, w1.Admitted, w1.Errors, w1.FirstError)
	}
}

// TestBenchOnThrowawayCluster runs bench without a database: it starts a throwaway cluster on
// disk that preloads pg_stat_statements, and reports where server time goes, per workload,
// with pgadmit's statement names and the statements nested in its functions.
func TestBenchOnThrowawayCluster(t *testing.T) {
	t.Parallel()
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	stdout, stderr, code := cli(t, nil, "bench", "--workers", "2", "--duration", "300ms", "--only", "W1,W2", "--statements", "6", "--json", jsonPath)
	if code != exitOK && strings.Contains(stderr, pgcluster.ErrNoPostgres.Error()) && os.Getenv("DATABASE_URL") != "" {
		t.Skip("no PostgreSQL binaries to start a throwaway cluster with")
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if code != exitOK {
		t.Fatalf("bench on a throwaway cluster: exit %d", code)
	}
	if !regexp.MustCompile(`(?m)^  on disk in /\S+/pgadmit-\S+, fsync and synchronous_commit on, `).MatchString(stderr) {
		t.Errorf("bench does not say that its throwaway cluster is on disk, fsync on")
	}
	if !strings.Contains(stdout, ", fsync on, synchronous_commit on, schema version ") {
		t.Errorf("bench's header does not show fsync and synchronous_commit")
	}
	if !strings.Contains(stderr, "shared_preload_libraries=pg_stat_statements") {
		// An installation without the contrib module: the report says why it is missing.
		if !strings.Contains(stdout, "server time per statement: unavailable (pg_stat_statements is not loaded)") {
			t.Errorf("no pg_stat_statements and no line saying the report is unavailable")
		}
		return
	}
	row := `(?m)^\s+\d+\s+\d+\.\d\s+\d+\.\d\s+\d+\s+\d+\.\d  `
	for _, re := range []string{
		`(?m)^server time per statement, from pg_stat_statements \d+\.\d+ \(top-level and nested statements\)\.$`,
		`(?m)^W1 window, many keys: \d+ ms of server time, \d+ µs per operation$`,
		`(?m)^W2 gateway request: \d+ ms of server time, \d+ µs per operation$`,
		`(?m)^\s+CALLS\s+PLAN µs\s+EXEC µs\s+PLANS\s+TOTAL ms  STATEMENT$`,
		row + `AdmissionReserve(One)? \(calls pgadmit_reserve(_one)?\)$`,
		row + `AdmissionSettle(One)? \(calls pgadmit_settle(_one)?\)$`,
		row + `  in pgadmit_(reserve|settle)(_one)?: \S`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("bench's server-time report does not match %s", re)
		}
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		ServerTime struct {
			Available    bool   `json:"available"`
			SessionTrack string `json:"session_track"`
			Workloads    []struct {
				Workload   string                 `json:"workload"`
				Ops        int64                  `json:"ops"`
				ServerMs   float64                `json:"server_ms"`
				Statements []servertime.Statement `json:"statements"`
			} `json:"workloads"`
		} `json:"server_time"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	st := rep.ServerTime
	if !st.Available || st.SessionTrack != "all" || len(st.Workloads) != 2 {
		t.Fatalf("bench JSON server_time: %s", b)
	}
	for _, w := range st.Workloads {
		if w.Ops <= 0 || w.ServerMs <= 0 || len(w.Statements) == 0 || len(w.Statements) > 6 {
			t.Errorf("server time of %s: %d ops, %.1f ms, %d statements", w.Workload, w.Ops, w.ServerMs, len(w.Statements))
		}
		for _, s := range w.Statements {
			if s.Calls > 0 && (s.Query == "" || s.Name == "" || s.MeanExecUs <= 0) {
				t.Errorf("%s: statement %+v", w.Workload, s)
			}
		}
	}
}

// On a database that pgadmit has not migrated, or not fully, the commands that need its tables
// say so and what to run, in one line, instead of passing on the server's "relation ... does
// not exist". Nothing they print may pass for work done: at version 5, where prune's lease and
// first steps find their tables, prune printed its line of zero counts, for the steps that
// failed too (as recover and doctor print nothing there).
func TestCommandsOnAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	latest := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version"))
	for _, to := range []string{"5", "3", "0"} {
		cliOK(t, "--database-url", url, "migrate", "down", "--to", to)
		for _, args := range [][]string{{"doctor"}, {"inspect"}, {"recover"}, {"prune"}} {
			out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
			want := "pgadmit " + args[0] + ": the database's pgadmit schema is at version " + to + ", this pgadmit needs " + latest + ": run 'pgadmit migrate up'\n"
			if code != exitFailure || errOut != want {
				t.Errorf("pgadmit %s at schema version %s: exit %d, stderr %q; want exit %d, stderr %q", args[0], to, code, errOut, exitFailure, want)
			}
			if out != "" {
				t.Errorf("pgadmit %s at schema version %s: stdout %q, want nothing", args[0], to, out)
			}
		}
	}
}

// migrate up on a connection with no current schema (no schema of its search_path exists) and
// pgadmit nowhere says there is no schema to install it into, and what to do; it failed with
// the server's "no schema has been selected to create in" (SQLSTATE 3F000). The commands that
// need pgadmit's tables say the same before 'pgadmit migrate up': they advised it alone, which
// then refused.
func TestMigrateUpWithNoSchemaToInstallInto(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t) + "&search_path=nosuch"
	const noSchema, advice = noSchemaOnNosuch, noSchemaAdvice
	want := `pgadmit migrate: nothing applied: ` + noSchema
	out, errOut, code := cli(t, nil, "--database-url", url, "migrate", "up")
	if code != exitFailure || out != "" || !strings.HasPrefix(errOut, want) || !strings.HasSuffix(errOut, advice+"\n") {
		t.Errorf("migrate up with no current schema: exit %d, stdout %q, stderr %q; want exit 1 and %q...", code, out, errOut, want)
	}
	latest, err := migrationVersions()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"doctor"}, {"inspect"}, {"recover"}, {"prune"}} {
		out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		want := fmt.Sprintf("pgadmit %s: the database's pgadmit schema is at version 0, this pgadmit needs %d, and %s", args[0], latest[len(latest)-1], noSchema)
		if code != exitFailure || out != "" || !strings.HasPrefix(errOut, want) || !strings.HasSuffix(errOut, advice+", then run 'pgadmit migrate up'\n") {
			t.Errorf("pgadmit %s with no current schema: exit %d, stdout %q, stderr %q; want exit 1 and %q...", args[0], code, out, errOut, want)
		}
	}
}

// A DBA may keep pgadmit in a schema of its own (README: "A schema of its own"); a connection
// whose search_path leaves that schema out sees version 0 there. The commands that check the
// version say where pgadmit's version table is and how to put its schema on the search_path,
// instead of advising 'pgadmit migrate up', which would install a second, empty pgadmit in
// public that the tools would read while the gateways use the real one. migrate up refuses
// there, creating nothing, unless --new-copy asks for that second pgadmit.
func TestCommandsOnADatabaseMigratedIntoAnotherSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, ownURL := migratedIntoSchemaOfItsOwn(t)
	latest := strings.TrimSpace(cliOK(t, "--database-url", ownURL, "migrate", "version"))
	hint := `the database's pgadmit schema is at version 0 on this connection's search_path ("$user", public), ` +
		`but pgadmit's version table pgadmit_goose_version is in schema pgadmit: put that schema first in the search_path ` +
		`(search_path=pgadmit in the database URL, or set on the role: README, "A schema of its own")`
	for _, args := range [][]string{{"doctor"}, {"inspect"}, {"recover"}, {"prune"}} {
		out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		want := "pgadmit " + args[0] + ": " + hint + ", not 'pgadmit migrate up', which would install a second pgadmit in schema public\n"
		if code != exitFailure || errOut != want || out != "" {
			t.Errorf("pgadmit %s with pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit %d, stderr %q",
				args[0], code, out, errOut, exitFailure, want)
		}
	}

	for _, to := range [][]string{nil, {"--to", "3"}} {
		args := append([]string{"--database-url", url, "migrate", "up"}, to...)
		out, errOut, code := cli(t, nil, args...)
		want := "pgadmit migrate: nothing applied: " + hint + ", or run 'pgadmit migrate up --new-copy' to install a second pgadmit in schema public all the same\n"
		if code != exitFailure || errOut != want || out != "" {
			t.Errorf("pgadmit %s with pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit %d, stderr %q",
				strings.Join(args, " "), code, out, errOut, exitFailure, want)
		}
	}
	// Nothing was created in public: from the schema pgadmit, no other schema holds a version table.
	own := pgtest.OpenPool(t, ownURL)
	where, err := db.New().VersionTableElsewhere(ctx, own, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if where.CurrentSchema != "pgadmit" || len(where.OtherSchemas) != 0 {
		t.Errorf("after the refused migrate up, from the schema pgadmit: %+v; want current schema pgadmit and no other", where)
	}
	// migrate version and status answer for this connection, as before (exit 0: version 0, every
	// migration pending), and warn where pgadmit is. down, which could revert nothing of it, fails
	// as up does, so that a script's 'down --to 0' does not read success.
	warning := "pgadmit migrate: warning: " + hint + "\n"
	if out, errOut, code := cli(t, nil, "--database-url", url, "migrate", "version"); code != exitOK || out != "0\n" || errOut != warning {
		t.Errorf("migrate version with pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit 0, stdout \"0\\n\", stderr %q", code, out, errOut, warning)
	}
	if out, errOut, code := cli(t, nil, "--database-url", url, "migrate", "status"); code != exitOK || !strings.Contains(out, "pending") || strings.Contains(out, "applied") || errOut != warning {
		t.Errorf("migrate status with pgadmit in another schema: exit %d, stderr %q; want exit 0, every migration pending, stderr %q; stdout:\n%s", code, errOut, warning, out)
	}
	for _, to := range [][]string{nil, {"--to", "0"}} {
		args := append([]string{"--database-url", url, "migrate", "down"}, to...)
		out, errOut, code := cli(t, nil, args...)
		if want := "pgadmit migrate: nothing reverted: " + hint + "\n"; code != exitFailure || out != "" || errOut != want {
			t.Errorf("pgadmit %s with pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit %d, stderr %q",
				strings.Join(args, " "), code, out, errOut, exitFailure, want)
		}
	}
	// Nor did they create anything in public.
	if where, err := db.New().VersionTableElsewhere(ctx, own, schema.VersionTable); err != nil || len(where.OtherSchemas) != 0 {
		t.Errorf("after migrate version, status and down, from the schema pgadmit: %+v, %v; want no other schema", where, err)
	}
	if out := strings.TrimSpace(cliOK(t, "--database-url", ownURL, "migrate", "version")); out != latest {
		t.Errorf("after migrate down on the other search_path, pgadmit's schema is at version %s, want %s", out, latest)
	}
	if _, errOut, code := cli(t, nil, "--database-url", url, "migrate", "status", "--new-copy"); code != exitUsage || !strings.Contains(errOut, "--new-copy") {
		t.Errorf("migrate status --new-copy: exit %d, stderr %q; want a usage error", code, errOut)
	}

	// Asked for, the second pgadmit is installed in public, and the commands use it.
	if out := cliOK(t, "--database-url", url, "migrate", "up", "--new-copy"); !strings.Contains(out, "up   00001_init.sql") || !strings.Contains(out, "schema version "+latest) {
		t.Errorf("migrate up --new-copy:\n%s", out)
	}
	if out, errOut, code := cli(t, nil, "--database-url", url, "doctor"); code != exitOK || errOut != "" {
		t.Errorf("doctor on the second pgadmit: exit %d, stdout %q, stderr %q; want exit 0 and nothing on stderr", code, out, errOut)
	}
}

// A role that has pgadmit's schema in its search_path but no USAGE on it: PostgreSQL leaves the
// schema out of the search_path, so the connection sees version 0 too, but the fix is the grant
// (docs/privileges.sql's), not the search_path it already has. Every command that reads the
// version says so: with public after pgadmit, where the role may read and would create, and with
// pgadmit alone, where the session has no current schema at all: in the URL, and set on the role
// (the README's `ALTER ROLE ... SET search_path = pgadmit`), which the URL then leaves as it is.
func TestCommandsAsARoleWithoutUsageOnPgadmitsSchema(t *testing.T) {
	t.Parallel()
	url, _ := migratedIntoSchemaOfItsOwn(t)
	for _, c := range []struct {
		searchPath, secondCopy string
		onRole                 bool // searchPath set on the role, not in the URL
	}{
		{"pgadmit,public", "a second pgadmit in schema public", false},
		{"pgadmit", "", false},
		{"pgadmit", "", true},
	} {
		var roleURL, role string
		if c.onRole {
			roleURL, role = pgtest.NoGrantsURL(t, url)
			pgtest.SetRoleSearchPath(t, url, role, c.searchPath)
		} else {
			roleURL, role = pgtest.NoGrantsURL(t, url+"&search_path="+c.searchPath)
		}
		hint := `the database's pgadmit schema is at version 0 on this connection's search_path (` + c.searchPath + `), ` +
			`but pgadmit's version table pgadmit_goose_version is in schema pgadmit, on which role ` + role + ` has no USAGE, so PostgreSQL leaves it out of the search_path: ` +
			`GRANT USAGE ON SCHEMA pgadmit TO ` + role + ` (docs/privileges.sql grants it to its roles) and have that schema first in the search_path ` +
			`(search_path=pgadmit in the database URL, or set on the role: README, "A schema of its own")`
		for _, args := range [][]string{{"doctor"}, {"inspect"}, {"recover"}, {"prune"}} {
			out, errOut, code := cli(t, nil, append([]string{"--database-url", roleURL}, args...)...)
			// With no current schema, migrate up refuses (below): the advice is the hint alone.
			want := "pgadmit " + args[0] + ": " + hint + "\n"
			if c.secondCopy != "" {
				want = "pgadmit " + args[0] + ": " + hint + ", not 'pgadmit migrate up', which would install " + c.secondCopy + "\n"
			}
			if code != exitFailure || errOut != want || out != "" {
				t.Errorf("pgadmit %s as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stdout %q, stderr %q; want exit %d, stderr %q",
					args[0], c.searchPath, code, out, errOut, exitFailure, want)
			}
		}
		// With no current schema (search_path pgadmit alone), there is no second pgadmit to
		// install: up does not offer --new-copy, and --new-copy says why it installs nothing (it
		// failed with the server's 'relation "pgadmit_goose_lock" does not exist').
		wantUp := "pgadmit migrate: nothing applied: " + hint + ", or run 'pgadmit migrate up --new-copy' to install " + c.secondCopy + " all the same\n"
		if c.secondCopy == "" {
			wantUp = "pgadmit migrate: nothing applied: " + hint + "\n"
		}
		if out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", "up"); code != exitFailure || out != "" || errOut != wantUp {
			t.Errorf("migrate up as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stdout %q, stderr %q; want %q", c.searchPath, code, out, errOut, wantUp)
		}
		if c.secondCopy == "" {
			want := "pgadmit migrate: nothing applied: " + hint + "; --new-copy has no schema to install a second pgadmit into (no schema of the search_path exists that role " + role + " may use)\n"
			if out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", "up", "--new-copy"); code != exitFailure || out != "" || errOut != want {
				t.Errorf("migrate up --new-copy as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stdout %q, stderr %q; want %q", c.searchPath, code, out, errOut, want)
			}
		}
		warning := "pgadmit migrate: warning: " + hint + "\n"
		if out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", "version"); code != exitOK || out != "0\n" || errOut != warning {
			t.Errorf("migrate version as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stdout %q, stderr %q", c.searchPath, code, out, errOut)
		}
		if out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", "status"); code != exitOK || !strings.Contains(out, "pending") || strings.Contains(out, "applied") || errOut != warning {
			t.Errorf("migrate status as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stderr %q; want exit 0, every migration pending, stderr %q; stdout:\n%s",
				c.searchPath, code, errOut, warning, out)
		}
		if out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", "down", "--to", "0"); code != exitFailure || out != "" || errOut != "pgadmit migrate: nothing reverted: "+hint+"\n" {
			t.Errorf("migrate down --to 0 as a role without USAGE on pgadmit's schema, search_path %s: exit %d, stdout %q, stderr %q", c.searchPath, code, out, errOut)
		}
	}
}

// On a database a few migrations behind this pgadmit, whose tables and functions the operator
// commands can still use, they run, but warn that the schema is behind and what to run: a
// gateway built with this pgadmit would fail on it, and doctor must not pass for all clear.
func TestCommandsOnADatabaseBehindWarn(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	latest := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version"))
	const to = "9"
	cliOK(t, "--database-url", url, "migrate", "down", "--to", to)
	for _, args := range [][]string{{"doctor"}, {"inspect"}, {"recover"}, {"prune"}} {
		out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		want := "pgadmit " + args[0] + ": warning: schema version " + to + " is behind this pgadmit's migrations, which end at " + latest + ": run 'pgadmit migrate up'\n"
		if code != exitOK || errOut != want {
			t.Errorf("pgadmit %s at schema version %s: exit %d, stderr %q; want exit 0, stderr %q", args[0], to, code, errOut, want)
		}
		if out == "" {
			t.Errorf("pgadmit %s at schema version %s: no output", args[0], to)
		}
	}
}

// A database that a newer pgadmit migrated (its version table names a migration this binary
// does not embed): migrate says so instead of goose's "version not found", and reverts nothing.
func TestMigrateADatabaseAheadOfThisPgadmit(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	latest, err := strconv.ParseInt(strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Record a migration latest+1 as a newer pgadmit would have, through goose's own store.
	pgtest.RecordNewerMigration(t, pool, latest+1)
	ahead := strconv.FormatInt(latest+1, 10)
	note := "schema version " + ahead + " is newer than this pgadmit's migrations, which end at " + strconv.FormatInt(latest, 10)

	for _, to := range [][]string{nil, {"--to", "1"}} {
		args := append([]string{"--database-url", url, "migrate", "down"}, to...)
		out, errOut, code := cli(t, nil, args...)
		want := "pgadmit migrate: " + note + ": revert it with the pgadmit that applied it\n"
		if code != exitFailure || errOut != want || out != "" {
			t.Errorf("pgadmit %s: exit %d, stdout %q, stderr %q; want exit %d and stderr %q", strings.Join(args, " "), code, out, errOut, exitFailure, want)
		}
	}
	if v := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")); v != ahead {
		t.Errorf("migrate version after a refused down = %s, want %s: something was reverted", v, ahead)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "up"); !strings.Contains(out, "nothing to do") || !strings.Contains(out, note) {
		t.Errorf("migrate up on a database ahead:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "status"); !strings.Contains(out, note) {
		t.Errorf("migrate status on a database ahead:\n%s", out)
	}
	// The operators' commands still run, and warn.
	for _, cmd := range []string{"inspect", "doctor", "recover", "prune"} {
		_, errOut, code := cli(t, nil, "--database-url", url, cmd)
		want := "pgadmit " + cmd + ": warning: " + note + ": this pgadmit may misread it; upgrade pgadmit\n"
		if code != 0 || errOut != want {
			t.Errorf("pgadmit %s on a database ahead: exit %d, stderr %q; want exit 0 and stderr %q", cmd, code, errOut, want)
		}
	}
	// So does bench, whose figures would measure this pgadmit's statements on a newer schema.
	_, errOut, code := cli(t, nil, "--database-url", url, "bench", "--only", "W1", "--workers", "1", "--duration", "100ms", "--statements", "0")
	if want := "pgadmit bench: warning: " + note + ": this pgadmit may misread it; upgrade pgadmit\n"; code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("pgadmit bench on a database ahead: exit %d, stderr %q; want exit 0 and a stderr that holds %q", code, errOut, want)
	}
}

// The free room of a window is computed exactly, as the database holds it:
// 1 - 0.9 is 0.1, not float64's 0.09999999999999998.
func TestInspectFreeIsExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool)
	lim := ratelimit.New(pool)
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "cents"}, Metric: "cost", Limit: 1, Amount: 0.9, Window: win},
	}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	out := cliOK(t, "--database-url", url, "inspect", "--scope", "api_key:cents")
	if !regexp.MustCompile(`(?m)^api_key:cents\s+cost\s+` + windowText(win) + `\s+0\s+0\.9\s+1\s+0\.1\s`).MatchString(out) {
		t.Errorf("inspect of a window of 1 with 0.9 reserved:\n%s", out)
	}
}

// --scope takes a scope as inspect shows it, so a type that holds a ":" can
// be named: inspect shows type tier:gold with key c as "tier:gold":c and
// type tier with key gold:c as tier:gold:c, and each --scope names its own.
func TestInspectScopeNamesATypeWithAColon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool)
	wt := windowText(win)
	lim := ratelimit.New(pool)
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "tier:gold", Key: "c"}, Metric: "requests", Limit: 10, Amount: 1, Window: win},
		{Scope: ratelimit.Scope{Type: "tier", Key: "gold:c"}, Metric: "requests", Limit: 10, Amount: 2, Window: win},
		{Scope: ratelimit.Scope{Type: "api_key", Key: "team a"}, Metric: "requests", Limit: 10, Amount: 3, Window: win},
	}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	for scope, want := range map[string]string{
		`"tier:gold":c`:    `(?m)^"tier:gold":c\s+requests\s+` + wt + `\s+0\s+1\s`,
		"tier:gold:c":      `(?m)^tier:gold:c\s+requests\s+` + wt + `\s+0\s+2\s`,
		`api_key:"team a"`: `(?m)^api_key:"team a"\s+requests\s+` + wt + `\s+0\s+3\s`,
	} {
		out := cliOK(t, "--database-url", url, "inspect", "--scope", scope)
		if !regexp.MustCompile(want).MatchString(out) || !strings.Contains(out, "WINDOWS (current)\nSCOPE") || strings.Count(out, "requests") != 1 {
			t.Errorf("inspect --scope %s: want its one row only:\n%s", scope, out)
		}
	}
}

// A --scope the database cannot hold as text (bytes that are not UTF-8, a
// NUL byte) is a usage error, refused before connecting, not the server's
// raw "invalid byte sequence for encoding UTF8" (SQLSTATE 22021).
func TestInspectRefusesScopeTextTheDatabaseCannotHold(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, scope := range []string{"api_key:\xff\xfe", "api\xc3:k", "api_key:a\x00b"} {
		out, errOut, code := cli(t, nil, "--database-url", url, "inspect", "--scope", scope)
		if code != exitUsage || out != "" {
			t.Errorf("inspect --scope %q: exit %d, want %d (stdout %q, stderr %q)", scope, code, exitUsage, out, errOut)
			continue
		}
		if !strings.Contains(errOut, "bad --scope") || strings.Contains(errOut, "SQLSTATE") {
			t.Errorf("inspect --scope %q: stderr %q, want a bad --scope usage error", scope, errOut)
		}
		oneLine(t, "usage error of inspect --scope "+strconv.Quote(scope), errOut)
	}
}

// inspectScene sets up on pool, in the window of length win, what the inspect tests read back,
// and returns the Limiter it reserved with: on api_key:team-42 a request and tokens (of 100 and 10000) with a lease of model:large
// (of 8), the grant it returns; 2 requests of 5 on api_key:other; a block of a Local limit of
// tokens on provider:gpt, held by "gw-1" until the test ends, which reported admitting 100 from it; and two async tasks queued on
// queue:team-42 (of 5).
func inspectScene(t *testing.T, pool *pgxpool.Pool, win time.Duration, tokens float64) (*ratelimit.Limiter, ratelimit.Grant) {
	t.Helper()
	ctx := context.Background()
	lim := ratelimit.New(pool)
	t.Cleanup(lim.Close)
	key := ratelimit.Scope{Type: "api_key", Key: "team-42"}
	g, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 100, Amount: 1, Window: win},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 10000, Amount: tokens, Window: win},
		{Scope: ratelimit.Scope{Type: "model", Key: "large"}, Metric: ratelimit.MetricConcurrent, Limit: 8, Amount: 1},
	})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "other"}, Metric: ratelimit.MetricRequests,
		Limit: 5, Amount: 2, Window: win}}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	// Its block stays open, as a live holder's, until the test ends (not returned idle).
	local := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Holder: "gw-1", IdleAfter: time.Hour}))
	t.Cleanup(local.Close)
	if _, err := local.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "provider", Key: "gpt"}, Metric: ratelimit.MetricTokens, Limit: 160_000, Amount: 100, Window: win, Local: true},
	}); err != nil {
		t.Fatalf("reserve local: %v", err)
	}
	// The holder reports what it admitted from its blocks every second: wait for its first
	// report, after which what inspect shows stays put (a report between two reads of a test
	// once changed its admitted 0 to 100).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rows, err := db.New().InspectAllotments(ctx, pool, db.InspectAllotmentsParams{MaxRows: 10})
		if err != nil {
			t.Fatalf("read allotments: %v", err)
		}
		if len(rows) == 1 && rows[0].Consumed == "100" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-1 never reported its 100 tokens admitted: %+v", rows)
		}
	}
	for range 2 {
		if _, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "queue", Key: "team-42"}, Metric: ratelimit.MetricQueueSize, Limit: 5, Amount: 1},
		}}); err != nil {
			t.Fatalf("create task: %v", err)
		}
	}
	return lim, g
}

// migratedIntoSchemaOfItsOwn makes an empty database whose schema pgadmit (README: "A schema of
// its own") pgadmit is migrated into, and returns its URL, whose search_path leaves that schema
// out, and the URL whose search_path is that schema.
func migratedIntoSchemaOfItsOwn(t *testing.T) (url, ownURL string) {
	t.Helper()
	url = pgtest.NewEmptyURL(t)
	if err := dbtest.New().OpsCreateSchemaOfItsOwn(context.Background(), pgtest.OpenPool(t, url)); err != nil {
		t.Fatal(err)
	}
	ownURL = url + "&search_path=pgadmit"
	cliOK(t, "--database-url", ownURL, "migrate", "up")
	return url, ownURL
}
