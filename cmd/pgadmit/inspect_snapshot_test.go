package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// inspect reads its four tables in one snapshot: what a gateway writes while inspect reads
// (here: after the windows, before the rest) shows up in none of them, never in only some.
// The reads used to be separate statements, each with a snapshot of its own, so a lease, a
// queue admission and a block taken meanwhile showed up while their window did not. (Not
// parallel: it sets the package's afterInspectRead hook.)
func TestInspectReadsOneSnapshot(t *testing.T) {
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool)
	lim := ratelimit.New(pool)
	local := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Holder: "gw-late"}))
	defer local.Close()
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "early"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: win},
	}); err != nil {
		t.Fatalf("reserve: %v", err)
	}

	var reads []string
	afterInspectRead = func(table string) {
		reads = append(reads, table)
		if table != "windows" {
			return
		}
		// A gateway admits a request meanwhile: a window, a lease, a queue admission, a block.
		if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "api_key", Key: "late"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: win},
			{Scope: ratelimit.Scope{Type: "model", Key: "late"}, Metric: ratelimit.MetricConcurrent, Limit: 4, Amount: 1},
		}); err != nil {
			t.Errorf("reserve between inspect's reads: %v", err)
		}
		if _, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "queue", Key: "late"}, Metric: ratelimit.MetricQueueSize, Limit: 5, Amount: 1},
		}}); err != nil {
			t.Errorf("create task between inspect's reads: %v", err)
		}
		if _, err := local.Reserve(ctx, "", "", []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "provider", Key: "late"}, Metric: ratelimit.MetricTokens, Limit: 160_000, Amount: 100, Window: win, Local: true},
		}); err != nil {
			t.Errorf("reserve a block between inspect's reads: %v", err)
		}
	}
	t.Cleanup(func() { afterInspectRead = nil })

	out := cliOK(t, "--database-url", url, "inspect")
	if want := []string{"windows", "leases", "admissions", "allotments"}; !slices.Equal(reads, want) {
		t.Fatalf("inspect's reads: %v, want %v", reads, want)
	}
	if !strings.Contains(out, "api_key:early") {
		t.Errorf("inspect does not show what was there before it started:\n%s", out)
	}
	for _, late := range []string{"api_key:late", "model:late", "queue:late", "provider:late"} {
		if strings.Contains(out, late) {
			t.Errorf("inspect shows %s, written after its first read: its tables come from different snapshots\n%s", late, out)
		}
	}
	// What was written meanwhile is there for the next inspect, in every table.
	afterInspectRead = nil
	out = cliOK(t, "--database-url", url, "inspect")
	for _, late := range []string{"api_key:late", "model:late", "queue:late", "provider:late"} {
		if !strings.Contains(out, late) {
			t.Errorf("the next inspect does not show %s:\n%s", late, out)
		}
	}
}
