package ratelimit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Recover run whose connection was lost in its first step: the result
// counts what that step did before (its counts that stayed 0 are left out:
// they would read as found nothing), and the error names the step and
// those the run never reached. Here both are built by hand; from a run they
// are what maint.Recover(ctx) returned.
func ExampleRecoveryResult_Describe() {
	recovered := ratelimit.RecoveryResult{ReleasedRateReservations: 1, FailedAttempts: 1, FailedTasks: 1}
	err := &ratelimit.StepError{
		Job:  "recover",
		Step: "reclaim expired tasks",
		Err:  errors.New("ratelimit: recover: reclaim expired tasks: conn closed"),
		NotRun: []string{"release reservations of finished tasks", "release expired leases", "release leases of finished tasks",
			"fail attempts of finished tasks", "release reservations of finished attempts", "release leases of finished attempts",
			"delete admissions of finished tasks", "return lost allotments"},
	}
	fmt.Println(recovered.Describe(err))
	// Output:
	// released 1 reservation; failed 1 attempt; failed 1 sync task; failed steps: reclaim expired tasks; not run: the 8 steps after reclaim expired tasks
}

// A Prune run whose allotments step the server rejected (its table
// missing, say): the other steps ran, and their counts are said, 0
// too; the allotments count is left out, and the step named. Built by hand,
// as from maint.Prune(ctx, 24*time.Hour).
func ExamplePruneResult_Describe() {
	pruned := ratelimit.PruneResult{Cutoff: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), Counters: 2, Events: 1}
	err := &ratelimit.StepError{Job: "prune", Step: "allotments", Err: errors.New(`ratelimit: prune: allotments: relation "gateway_rate_limit_allotments" does not exist`)}
	fmt.Println(pruned.Describe(err))
	// Output:
	// pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 0 reservations, 0 leases, 1 event, finished tasks kept; failed steps: allotments
}

// A Recover run's progress (WithProgress) after the batch of its second
// step, its first step having failed: Describe leaves out the counts only
// that step feeds (async tasks requeued, sync and poison tasks failed),
// which Summary says at 0 as if it had found nothing ("requeued 0 async
// tasks; failed 0 sync tasks and 0 poison tasks"), and names it. The steps not
// reached yet count 0 in both. Built by hand; from a run it is what the
// report func was given.
func ExampleProgress_Describe() {
	sofar := ratelimit.RecoveryResult{ReleasedRateReservations: 2}
	p := ratelimit.Progress{
		Job: "recover", Step: "release reservations of finished tasks", Batches: 2, Elapsed: 40 * time.Millisecond,
		Summary: sofar.String(), Recovery: sofar, Failed: []string{"reclaim expired tasks"},
	}
	fmt.Println(p.Describe())
	// Output:
	// released 0 leases and 2 reservations; failed 0 attempts; cleaned 0 admissions; returned 0 lost allotments; failed steps: reclaim expired tasks
}
