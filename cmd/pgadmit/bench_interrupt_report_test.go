package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Ctrl-C after some workloads finished still reports them: their rows, their checks, and the
// --json file with their results, which says the run was interrupted (and not ok); then
// "interrupted" on stderr and exit 1. The workload cut short has no row.
func TestBenchInterruptedReportsTheWorkloadsThatFinished(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	path := filepath.Join(t.TempDir(), "bench.json")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	stdout, stderr, exited := startBench(ctx, url, "--only", "W4,W7", "--workers", "4", "--think", "20s", "--duration", "1m", "--json", path)
	awaitLog(t, stdout, `\nW4 exactness +\d+ `)
	// W4 has given its leases back: these are W7's workers', in their pause.
	awaitHolds(t, pool, "the 4 W7 workers' leases", stderr, func(h dbHolds) bool { return h.leases == 4 })
	interrupt()
	awaitInterrupted(t, stdout, stderr, exited, "bench")
	out := stdout.String()
	for _, want := range []string{
		"W4: window limit 100: admitted: 100 (want 100) ok\n",
		"W4: concurrent limit 10: live leases in the database: 10 (want 10) ok\n",
		"\ninterrupted: the workloads above finished, the others did not\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bench interrupted in W7 does not print %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\nW7 ") {
		t.Errorf("bench interrupted in W7 printed a row of it:\n%s", out)
	}
	var rep struct {
		OK          bool `json:"ok"`
		Interrupted bool `json:"interrupted"`
		Results     []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"results"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatalf("--json of an interrupted bench: %v", err)
	}
	if rep.OK || !rep.Interrupted || len(rep.Results) != 1 || rep.Results[0].Name != "W4 exactness" || !rep.Results[0].OK {
		t.Errorf("--json of a bench interrupted in W7: %s\nwant ok false, interrupted true and W4's result alone, ok", b)
	}
}
