package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The line recover and prune print says what the run did, count by count, as its result's String
// does. Its steps are independent: one that failed (the server rejected it, on a schema behind
// this pgadmit's say) left the others to run, and its counts at 0, which read as a step that ran
// and found nothing; so did the steps after one that stopped the run (cut off, the connection
// lost), which never ran. So a count that stayed 0, every step feeding it failed or not run, is
// left out, and the line ends by naming the steps that failed (their errors say why) and saying
// how many did not run. Without a failed step the line is the result's String.

// tally is one count of a run's line: its text ("%d leases"), its value, and the steps of the run
// that add to it (as ratelimit.StepError and Progress name them); or a remark of its clause, text
// without a count ("finished tasks kept"), said only beside a count.
type tally struct {
	text  string
	n     int64
	steps []string
}

// clause is a part of a run's line: a verb and its counts, joined by sep, then suffix.
type clause struct {
	verb, sep, suffix string
	tallies           []tally
}

// reclaimStep is Recover's first step, which adds to most of its counts.
const reclaimStep = "reclaim expired tasks"

// recoveryClauses are what a Recover run's line says, as RecoveryResult.String says it.
func recoveryClauses(r ratelimit.RecoveryResult) []clause {
	return []clause{
		{verb: "released", sep: " and ", tallies: []tally{
			{"%d leases", r.ReleasedConcurrencyLeases, []string{reclaimStep, "release expired leases", "release leases of finished tasks", "release leases of finished attempts"}},
			{"%d reservations", r.ReleasedRateReservations, []string{reclaimStep, "release reservations of finished tasks", "release reservations of finished attempts"}},
		}},
		{verb: "failed", tallies: []tally{{"%d attempts", r.FailedAttempts, []string{reclaimStep, "fail attempts of finished tasks"}}}},
		{verb: "requeued", tallies: []tally{{"%d async tasks", r.RequeuedAsyncTasks, []string{reclaimStep}}}},
		{verb: "failed", sep: " and ", suffix: " tasks", tallies: []tally{
			{"%d sync", r.FailedTasks, []string{reclaimStep}},
			{"%d poison", r.FailedPoisonTasks, []string{reclaimStep}},
		}},
		{verb: "cleaned", tallies: []tally{{"%d admissions", r.CleanedTaskAdmissions, []string{reclaimStep, "delete admissions of finished tasks"}}}},
		{verb: "returned", tallies: []tally{{"%d lost allotments", r.ReturnedAllotments, []string{"return lost allotments"}}}},
	}
}

// pruneClauses are what a Prune run's line says after its cutoff, as PruneResult.String says it.
func pruneClauses(r ratelimit.PruneResult) []clause {
	tasks := tally{text: "finished tasks kept"}
	if !r.TaskCutoff.IsZero() {
		tasks = tally{"%d tasks finished before " + r.TaskCutoff.UTC().Format(time.RFC3339), r.Tasks, []string{"tasks"}}
	}
	return []clause{
		{verb: "released", tallies: []tally{{"%d stale reservations", r.ReleasedStaleReservations, []string{"release stale reservations"}}}},
		{verb: "deleted", sep: ", ", tallies: []tally{
			{"%d counter windows", r.Counters, []string{"counters"}},
			{"%d reservations", r.Reservations, []string{"reservations"}},
			{"%d allotments", r.Allotments, []string{"allotments"}},
			{"%d leases", r.Leases, []string{"released leases", "expired leases"}},
			{"%d events", r.Events, []string{"events"}},
			tasks,
		}},
	}
}

// describeClauses writes clauses as a run's line does, leaving out the counts that stayed 0
// because every step feeding them failed or did not run, and then says which failed, and how
// many did not run.
func describeClauses(clauses []clause, failed steps) string {
	var parts []string
	for _, c := range clauses {
		var said []string
		counted := false // a remark alone ("finished tasks kept") is not said
		for _, t := range c.tallies {
			if t.n == 0 && len(t.steps) > 0 && !slices.ContainsFunc(t.steps, failed.ran) {
				continue
			}
			if strings.Contains(t.text, "%d") {
				said, counted = append(said, fmt.Sprintf(t.text, t.n)), true
			} else {
				said = append(said, t.text)
			}
		}
		if counted {
			parts = append(parts, c.verb+" "+strings.Join(said, c.sep)+c.suffix)
		}
	}
	if n := len(failed.failed); n > 0 {
		parts = append(parts, "failed steps: "+strings.Join(failed.failed, ", "))
		switch last := failed.failed[n-1]; len(failed.notRun) {
		case 0:
		case 1:
			parts = append(parts, "not run: the step after "+last)
		default:
			parts = append(parts, fmt.Sprintf("not run: the %d steps after %s", len(failed.notRun), last))
		}
	}
	return strings.Join(parts, "; ")
}

// describePrune says what a Prune run did, in a line, naming the steps that failed and saying how
// many did not run (failedSteps; see describeClauses).
func describePrune(r ratelimit.PruneResult, failed steps) string {
	if r.Skipped || len(failed.failed) == 0 {
		return r.String()
	}
	return "pruned before " + r.Cutoff.UTC().Format(time.RFC3339) + ": " + describeClauses(pruneClauses(r), failed)
}

// steps are those of a run that failed, in order, and those it did not run, after the last that
// failed (it stopped there).
type steps struct {
	failed, notRun []string
}

// ran reports whether step ran and did not fail.
func (s steps) ran(step string) bool {
	return !slices.Contains(s.failed, step) && !slices.Contains(s.notRun, step)
}

// failedSteps finds the steps that err names as failed, and those it says the run did not reach
// (the *ratelimit.StepError it holds, however joined and wrapped).
func failedSteps(err error) steps {
	var found steps
	eachError(err, func(se *ratelimit.StepError) {
		if !slices.Contains(found.failed, se.Step) {
			found.failed = append(found.failed, se.Step)
		}
		found.notRun = append(found.notRun, se.NotRun...)
	})
	return found
}
