package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// With no step failed, the line of recover and prune is their result's String, word for word:
// scripts and the README read it. With one failed, a count it alone feeds is left out only when
// it stayed 0; one that other steps fed too, or that the step fed before it failed, is said.
func TestRunLinesAreTheResultsStrings(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	rec := ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 2, FailedAttempts: 3, FailedTasks: 4,
		RequeuedAsyncTasks: 5, FailedPoisonTasks: 6, CleanedTaskAdmissions: 7, ReturnedAllotments: 8}
	if got, want := describeRecovery(rec, steps{}), rec.String(); got != want {
		t.Errorf("recover's line %q, want %q", got, want)
	}
	for _, p := range []ratelimit.PruneResult{
		{Cutoff: at, TaskCutoff: at.Add(-time.Hour), ReleasedStaleReservations: 1, Counters: 2, Reservations: 3, Leases: 4, Allotments: 5, Events: 6, Tasks: 7},
		{Cutoff: at, Counters: 2}, // finished tasks kept
	} {
		if got, want := describeClauses(pruneClauses(p), steps{}), p.String()[len("pruned before 2026-12-07T08:00:00Z: "):]; got != want {
			t.Errorf("prune's line %q, want %q", got, want)
		}
		if got, want := describePrune(p, steps{}), p.String(); got != want {
			t.Errorf("prune's line %q, want %q", got, want)
		}
	}

	rec.ReturnedAllotments = 0
	if got, want := describeRecovery(rec, steps{failed: []string{"return lost allotments"}}),
		strings.TrimSuffix(rec.String(), "; returned 0 lost allotments")+"; failed steps: return lost allotments"; got != want {
		t.Errorf("recover's line with its last step failed %q, want %q", got, want)
	}
	rec = ratelimit.RecoveryResult{FailedAttempts: 1}
	if got, want := describeRecovery(rec, steps{failed: []string{reclaimStep, "return lost allotments"}}),
		"released 0 leases and 0 reservations; failed 1 attempts; cleaned 0 admissions; failed steps: reclaim expired tasks, return lost allotments"; got != want {
		t.Errorf("recover's line with two steps failed %q, want %q", got, want)
	}
	// Cut off in its first step, after it had reclaimed a sync task: the counts of the steps it
	// did not reach are not said as 0 either.
	rec = ratelimit.RecoveryResult{ReleasedRateReservations: 1, FailedAttempts: 1, FailedTasks: 1}
	notRun := []string{"release reservations of finished tasks", "release expired leases", "release leases of finished tasks", "fail attempts of finished tasks",
		"release reservations of finished attempts", "release leases of finished attempts", "delete admissions of finished tasks", "return lost allotments"}
	if got, want := describeRecovery(rec, steps{failed: []string{reclaimStep}, notRun: notRun}),
		"released 1 reservations; failed 1 attempts; failed 1 sync tasks; failed steps: reclaim expired tasks; not run: the 8 steps after reclaim expired tasks"; got != want {
		t.Errorf("recover's line cut off in its first step %q, want %q", got, want)
	}
	p := ratelimit.PruneResult{Cutoff: at, TaskCutoff: at, Counters: 2}
	if got, want := describePrune(p, steps{failed: []string{"expired leases", "allotments"}, notRun: []string{"tasks"}}),
		"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 0 reservations, 0 leases, 0 events; "+
			"failed steps: expired leases, allotments; not run: the step after allotments"; got != want {
		t.Errorf("prune's line cut off in its last step but one %q, want %q", got, want)
	}
	p = ratelimit.PruneResult{Cutoff: at, Counters: 2, Allotments: 1}
	if got, want := describePrune(p, steps{failed: []string{"reservations", "allotments", "released leases", "expired leases", "events"}}),
		"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 1 allotments, finished tasks kept; "+
			"failed steps: reservations, allotments, released leases, expired leases, events"; got != want {
		t.Errorf("prune's line with five steps failed %q, want %q", got, want)
	}
	p = ratelimit.PruneResult{Cutoff: at, ReleasedStaleReservations: 1}
	if got, want := describePrune(p, steps{failed: []string{"counters", "reservations", "allotments", "released leases", "expired leases", "events"}}),
		"pruned before 2026-12-07T08:00:00Z: released 1 stale reservations; failed steps: counters, reservations, allotments, released leases, expired leases, events"; got != want {
		t.Errorf("prune's line with every delete failed %q, want %q", got, want)
	}
}

// The steps that the lines know feed their counts are the steps Recover and Prune run, by the
// names they give them: a step renamed or added in ratelimit would have its failure named at the
// line's end, but its count said as 0.
func TestRunLinesKnowEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ran := map[string][]string{}
	maint := ratelimit.NewMaintenance(pool, ratelimit.WithPruneEvents(true), ratelimit.WithProgress(0, func(p ratelimit.Progress) {
		if !slices.Contains(ran[p.Job], p.Step) {
			ran[p.Job] = append(ran[p.Job], p.Step)
		}
	}))
	if _, err := maint.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := maint.Prune(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	for job, clauses := range map[string][]clause{
		"recover": recoveryClauses(ratelimit.RecoveryResult{}),
		"prune":   pruneClauses(ratelimit.PruneResult{TaskCutoff: time.Now()}),
	} {
		var known []string
		for _, c := range clauses {
			for _, tl := range c.tallies {
				for _, s := range tl.steps {
					if !slices.Contains(known, s) {
						known = append(known, s)
					}
				}
			}
		}
		slices.Sort(known)
		slices.Sort(ran[job])
		if !slices.Equal(known, ran[job]) {
			t.Errorf("%s's line knows the steps %q, the run ran %q", job, known, ran[job])
		}
	}
}
