package ratelimit_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A long Prune says how far it has got after its batches: here after every
// one (every 0), with batches of one row, so that each report adds at most
// one row to the one before, the steps come in their order, and the last
// report says what the run returned.
func TestPruneReportsItsProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	var reports []ratelimit.Progress
	l, m := clocked(pool, &clock, ratelimit.WithPruneBatchSize(1),
		ratelimit.WithProgress(0, func(p ratelimit.Progress) { reports = append(reports, p) }))
	const n = 3
	for i := range n {
		w := window("api_key", uniqueKey(fmt.Sprint("progress", i)), ratelimit.MetricRequests, 10, 1)
		w.Window = time.Second
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{w})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Hour)

	res, err := m.Prune(ctx, time.Minute)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.Counters != n || res.Reservations != n {
		t.Fatalf("Prune = %+v, want %d counters and %d reservations deleted", res, n, n)
	}
	// Each row is a batch of its own, and each step ends with one that
	// finds nothing: n+1 batches for counters and reservations.
	var steps []string
	for i, p := range reports {
		if p.Job != "prune" || p.Batches != int64(i+1) || p.Elapsed < 0 {
			t.Fatalf("report %d = %+v, want job prune, batch %d", i, p, i+1)
		}
		if len(steps) == 0 || steps[len(steps)-1] != p.Step {
			steps = append(steps, p.Step)
		}
	}
	want := []string{"release stale reservations", "counters", "reservations", "released leases", "expired leases", "allotments", "tasks"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps reported %q, want %q", steps, want)
	}
	if got := countSteps(reports, "counters"); got != n+1 {
		t.Errorf("%d reports of the counters step, want %d (one per row, then the batch that found none)", got, n+1)
	}
	if last := reports[len(reports)-1]; last.Summary != res.String() || last.Prune != res ||
		last.Recovery != (ratelimit.RecoveryResult{}) || last.Failed != nil {
		t.Errorf("last report %q (%+v, failed %q), want what Prune returned, %q (%+v), and no failed step",
			last.Summary, last.Prune, last.Failed, res.String(), res)
	}
}

// Recover reports too; a run shorter than the interval reports nothing.
func TestRecoverReportsItsProgressNoMoreOftenThanAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var every, hourly []ratelimit.Progress
	m := ratelimit.NewMaintenance(pool, ratelimit.WithProgress(0, func(p ratelimit.Progress) { every = append(every, p) }))
	res, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(every) != 9 || every[0].Step != "reclaim expired tasks" || every[8].Step != "return lost allotments" ||
		every[8].Job != "recover" || every[8].Summary != res.String() || every[8].Recovery != res || !every[8].Prune.Cutoff.IsZero() {
		t.Errorf("reports of an empty recovery = %+v, want one per step, the last saying %q", every, res.String())
	}
	m = ratelimit.NewMaintenance(pool, ratelimit.WithProgress(time.Hour, func(p ratelimit.Progress) { hourly = append(hourly, p) }))
	if _, err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(hourly) != 0 {
		t.Errorf("a run shorter than the interval reported %+v", hourly)
	}
}

// countSteps counts the reports made during step.
func countSteps(reports []ratelimit.Progress, step string) int {
	n := 0
	for _, p := range reports {
		if p.Step == step {
			n++
		}
	}
	return n
}
