package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
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

// A Ctrl-C once every workload finished, as bench reads the server for its report of server time,
// reports the workloads as an interrupt during them does: their checks, the interrupted line and
// the --json file (without server_time). It used to print "interrupted" alone and write no
// file: the whole run was lost.
func TestBenchInterruptedDuringItsServerTimeReportReportsTheWorkloads(t *testing.T) {
	t.Parallel()
	c := pgtest.OwnCluster(t, pgcluster.Preload("pg_stat_statements"))
	if !slices.Contains(c.Preloaded(), "pg_stat_statements") {
		t.Skip("this PostgreSQL installation has no pg_stat_statements")
	}
	path := filepath.Join(t.TempDir(), "bench.json")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	// The interrupt comes as the last workload's row is printed, after its statements were
	// read: the report, which reads the server next, is what it cuts short.
	stdout := &interruptAfter{row: "W1 window, many keys ", interrupt: interrupt}
	stderr := &syncBuffer{}
	code := run(ctx, []string{"--database-url", c.URL(), "bench", "--only", "W1", "--workers", "2", "--duration", "100ms",
		"--statements", "3", "--progress", "0", "--json", path}, stdout, stderr, func(string) string { return "" })
	out := stdout.String()
	if code != exitFailure || stderr.String() != "pgadmit bench: interrupted\n" {
		t.Errorf("bench interrupted during its report: exit %d, stderr %q; want exit 1, interrupted\nstdout:\n%s", code, stderr.String(), out)
	}
	if !strings.Contains(out, "\ninterrupted: the workloads above finished, the others did not\n") || strings.Contains(out, "server time per statement") {
		t.Errorf("bench interrupted during its report does not say that W1 finished, or shows a report:\n%s", out)
	}
	var rep struct {
		OK          bool            `json:"ok"`
		Interrupted bool            `json:"interrupted"`
		ServerTime  json.RawMessage `json:"server_time"`
		Results     []struct {
			Name string `json:"name"`
		} `json:"results"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatalf("--json of a bench interrupted during its report: %v", err)
	}
	if rep.OK || !rep.Interrupted || rep.ServerTime != nil || len(rep.Results) != 1 || rep.Results[0].Name != "W1 window, many keys" {
		t.Errorf("--json of a bench interrupted during its report: %s\nwant ok false, interrupted true, no server_time, W1's result", b)
	}
}

// interruptAfter is bench's stdout: it calls interrupt once a line that begins with row was
// written whole.
type interruptAfter struct {
	syncBuffer
	row       string
	interrupt context.CancelFunc
}

func (w *interruptAfter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	for line := range strings.Lines(w.String()) {
		if strings.HasPrefix(line, w.row) && strings.HasSuffix(line, "\n") {
			w.interrupt()
		}
	}
	return n, err
}
