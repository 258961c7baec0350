package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
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

	lim := ratelimit.New(pool)
	key := ratelimit.Scope{Type: "api_key", Key: "team-42"}
	model := ratelimit.Scope{Type: "model", Key: "large"}
	g, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 100, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 10000, Amount: 500},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 8, Amount: 1},
	})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "other"}, Metric: ratelimit.MetricRequests, Limit: 5, Amount: 2}}); err != nil {
		t.Fatalf("reserve: %v", err)
	}

	// Two async tasks wait in a queue of 5.
	for range 2 {
		if _, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "queue", Key: "team-42"}, Metric: ratelimit.MetricQueueSize, Limit: 5, Amount: 1},
		}}); err != nil {
			t.Fatalf("create task: %v", err)
		}
	}

	out := cliOK(t, "--database-url", url, "inspect")
	for _, re := range []string{
		`(?m)^api_key:team-42\s+requests\s+1m\s+0\s+1\s+100\s+99\s+(1m0s|\d+s)$`,
		`(?m)^api_key:team-42\s+tokens\s+1m\s+0\s+500\s+10000\s+9500\s+(1m0s|\d+s)$`,
		`(?m)^api_key:other\s+requests\s+1m\s+0\s+2\s+5\s+3\s+(1m0s|\d+s)$`,
		`(?m)^model:large\s+1\s+1\s+8\s+0\s+\d+m\d+s$`,
		`(?m)^queue:team-42\s+2\s+5\s+2\s+0\s+0\s+\d+s$`,
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
	if !strings.Contains(out, "1 of 3 shown; raise --limit for more") {
		t.Errorf("inspect --limit 1:\n%s", out)
	}

	// Once committed, the window shows usage and the lease is gone.
	if _, err := lim.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	out = cliOK(t, "--database-url", url, "inspect", "--scope", "api_key:team-42")
	if !regexp.MustCompile(`(?m)^api_key:team-42\s+tokens\s+1m\s+420\s+0\s+10000\s+9580\s`).MatchString(out) {
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
	for _, w := range bench.Workloads() {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.Name) + `\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+0$`).MatchString(out) {
			t.Errorf("bench output has no row for %q with 0 errors", w.Name)
		}
	}
	if !strings.Contains(out, "all checks passed") {
		t.Errorf("bench checks did not pass")
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		OK      bool `json:"ok"`
		Results []struct {
			Name     string   `json:"name"`
			OpsPerS  *float64 `json:"ops_per_s"`
			P50      *int64   `json:"p50_us"`
			P99      *int64   `json:"p99_us"`
			Admitted *int64   `json:"admitted"`
			Rejected *int64   `json:"rejected"`
			Errors   *int64   `json:"errors"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, b)
	}
	if !rep.OK || len(rep.Results) != 5 {
		t.Fatalf("bench JSON: ok %v, %d results; want ok and 5\n%s", rep.OK, len(rep.Results), b)
	}
	for i, r := range rep.Results {
		code := []string{"W1", "W2", "W3", "W4", "W5"}[i]
		if !strings.HasPrefix(r.Name, code+" ") {
			t.Errorf("result %d is named %q, want it to start with %q", i, r.Name, code)
		}
		if r.OpsPerS == nil || r.P50 == nil || r.P99 == nil || r.Admitted == nil || r.Rejected == nil || r.Errors == nil {
			t.Errorf("result %q lacks a field:\n%s", r.Name, b)
			continue
		}
		if *r.OpsPerS <= 0 || *r.P50 <= 0 || *r.P99 < *r.P50 || *r.Errors != 0 {
			t.Errorf("result %q: ops/s %v, p50 %d, p99 %d, errors %d", r.Name, *r.OpsPerS, *r.P50, *r.P99, *r.Errors)
		}
	}
	if w4 := rep.Results[3]; *w4.Admitted != 110 {
		t.Errorf("W4 admitted %d, want 100 window + 10 concurrent", *w4.Admitted)
	}

	// --only runs a subset; --json - writes JSON to stdout and the table to stderr.
	stdout, stderr, code := cli(t, nil, "--database-url", url, "bench", "--workers", "2", "--duration", "50ms", "--only", "w3,W1", "--json", "-")
	if code != exitOK {
		t.Fatalf("bench --only: exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Results) != 2 ||
		!strings.HasPrefix(rep.Results[0].Name, "W1 ") || !strings.HasPrefix(rep.Results[1].Name, "W3 ") {
		t.Errorf("bench --only w3,W1 --json -: %v\n%s", err, stdout)
	}
	if !strings.Contains(stderr, "W1 window, many keys") {
		t.Errorf("bench --json -: table not on stderr:\n%s", stderr)
	}
}
