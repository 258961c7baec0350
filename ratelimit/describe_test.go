package ratelimit_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// String says every count, word for word as it did before Describe (logs, scripts and the README
// read it), and is Describe of a run that returned no error, or an error without a *StepError.
func TestResultStringIsDescribeOfNoFailure(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	noStep := fmt.Errorf("ratelimit: recover: release the recover lease: %w", errors.New("lock timeout"))
	for _, c := range []struct {
		name string
		r    interface {
			String() string
			Describe(error) string
		}
		want string
	}{
		{"recovery", ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 2, FailedAttempts: 3, FailedTasks: 4,
			RequeuedAsyncTasks: 5, FailedPoisonTasks: 6, CleanedTaskAdmissions: 7, ReturnedAllotments: 8},
			"released 1 lease and 2 reservations; failed 3 attempts; requeued 5 async tasks; failed 4 sync tasks and 6 poison tasks; cleaned 7 admissions; returned 8 lost allotments"},
		{"zero recovery", ratelimit.RecoveryResult{},
			"released 0 leases and 0 reservations; failed 0 attempts; requeued 0 async tasks; failed 0 sync tasks and 0 poison tasks; cleaned 0 admissions; returned 0 lost allotments"},
		{"skipped recovery", ratelimit.RecoveryResult{Skipped: true}, "recovery skipped: another process holds the recover lease"},
		{"prune", ratelimit.PruneResult{Cutoff: at, TaskCutoff: at.Add(-time.Hour), ReleasedStaleReservations: 1, Counters: 2, Reservations: 3,
			Leases: 4, Allotments: 5, Events: 6, Tasks: 7},
			"pruned before 2026-12-07T08:00:00Z: released 1 stale reservation; deleted 2 counter windows, 3 reservations, 5 allotments, 4 leases, 6 events, 7 tasks finished before 2026-12-07T07:00:00Z"},
		{"prune keeping tasks", ratelimit.PruneResult{Cutoff: at.In(time.FixedZone("CET", 3600)), Counters: 2},
			"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 0 reservations, 0 allotments, 0 leases, 0 events, finished tasks kept"},
		{"zero prune", ratelimit.PruneResult{}, "prune did nothing: it ended before it took the prune lease"},
		{"skipped prune", ratelimit.PruneResult{Skipped: true}, "prune skipped: another process holds the prune lease"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%s: String() = %q, want %q", c.name, got, c.want)
		}
		for _, err := range []error{nil, noStep} {
			if got := c.r.Describe(err); got != c.want {
				t.Errorf("%s: Describe(%v) = %q, want String's %q", c.name, err, got, c.want)
			}
		}
	}
}

// Describe leaves out a count that stayed 0 because every step feeding it failed or did not run
// (it would read as a step that ran and found nothing), and ends naming the failed steps and
// saying how many a run that stopped did not reach. A count that other steps fed too, or that
// the failed step fed before it failed, is said. The *StepErrors are found however the run's
// error was joined and wrapped; those of another job are not the run's.
func TestDescribeNamesTheFailedSteps(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	failed := func(job, step string, notRun ...string) error {
		return &ratelimit.StepError{Job: job, Step: step, Err: errors.New("rejected"), NotRun: notRun}
	}
	recovered := ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 2, FailedAttempts: 3, FailedTasks: 4,
		RequeuedAsyncTasks: 5, FailedPoisonTasks: 6, CleanedTaskAdmissions: 7}
	notRun := []string{"release reservations of finished tasks", "release expired leases", "release leases of finished tasks", "fail attempts of finished tasks",
		"release reservations of finished attempts", "release leases of finished attempts", "delete admissions of finished tasks", "return lost allotments"}
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"recover, its last step failed",
			recovered.Describe(errors.Join(errors.New("left 1 row"), failed("recover", "return lost allotments"))),
			"released 1 lease and 2 reservations; failed 3 attempts; requeued 5 async tasks; failed 4 sync tasks and 6 poison tasks; cleaned 7 admissions; " +
				"failed steps: return lost allotments"},
		{"recover, two steps failed, wrapped",
			ratelimit.RecoveryResult{FailedAttempts: 1}.Describe(fmt.Errorf("pass: %w",
				errors.Join(failed("recover", "reclaim expired tasks"), failed("recover", "return lost allotments")))),
			"released 0 leases and 0 reservations; failed 1 attempt; cleaned 0 admissions; failed steps: reclaim expired tasks, return lost allotments"},
		{"recover, cut off in its first step",
			ratelimit.RecoveryResult{ReleasedRateReservations: 1, FailedAttempts: 1, FailedTasks: 1}.Describe(failed("recover", "reclaim expired tasks", notRun...)),
			"released 1 reservation; failed 1 attempt; failed 1 sync task; failed steps: reclaim expired tasks; not run: the 8 steps after reclaim expired tasks"},
		{"recover, a prune's step error is not its own",
			recovered.Describe(errors.Join(failed("prune", "allotments"), failed("", "return lost allotments"))),
			"released 1 lease and 2 reservations; failed 3 attempts; requeued 5 async tasks; failed 4 sync tasks and 6 poison tasks; cleaned 7 admissions; " +
				"failed steps: return lost allotments"},
		{"recover skipped", ratelimit.RecoveryResult{Skipped: true}.Describe(failed("recover", "return lost allotments")),
			"recovery skipped: another process holds the recover lease"},
		{"prune, cut off in its last step but one",
			ratelimit.PruneResult{Cutoff: at, TaskCutoff: at, Counters: 2}.Describe(errors.Join(failed("prune", "expired leases"), failed("prune", "allotments", "tasks"))),
			"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 0 reservations, 0 leases, 0 events; " +
				"failed steps: expired leases, allotments; not run: the step after allotments"},
		{"prune, five steps failed",
			ratelimit.PruneResult{Cutoff: at, Counters: 2, Allotments: 1}.Describe(errors.Join(failed("prune", "reservations"), failed("prune", "allotments"),
				fmt.Errorf("wrapped: %w", errors.Join(failed("prune", "released leases"), failed("prune", "expired leases"))), failed("prune", "events"))),
			"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 1 allotment, finished tasks kept; " +
				"failed steps: reservations, allotments, released leases, expired leases, events"},
		{"prune, every delete failed",
			ratelimit.PruneResult{Cutoff: at, ReleasedStaleReservations: 1}.Describe(errors.Join(failed("prune", "counters"), failed("prune", "reservations"),
				failed("prune", "allotments"), failed("prune", "released leases"), failed("prune", "expired leases"), failed("prune", "events"))),
			"pruned before 2026-12-07T08:00:00Z: released 1 stale reservation; failed steps: counters, reservations, allotments, released leases, expired leases, events"},
		{"prune, the same step twice", ratelimit.PruneResult{Cutoff: at}.Describe(errors.Join(failed("prune", "counters"), failed("prune", "counters"))),
			"pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 0 reservations, 0 allotments, 0 leases, 0 events, finished tasks kept; " +
				"failed steps: counters"},
		{"zero prune", ratelimit.PruneResult{}.Describe(failed("prune", "counters")), "prune did nothing: it ended before it took the prune lease"},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
	}
}

// A Progress describes the run so far as the result's Describe does the run's error, from the
// steps failed so far (Failed); without one, it is Summary.
func TestProgressDescribeNamesTheStepsFailedSoFar(t *testing.T) {
	t.Parallel()
	pruned := ratelimit.PruneResult{Cutoff: time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), Counters: 5}
	recovered := ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 2}
	for _, c := range []struct {
		name string
		p    ratelimit.Progress
		want string
	}{
		{"prune, allotments failed", ratelimit.Progress{Job: "prune", Step: "events", Summary: pruned.String(), Prune: pruned, Failed: []string{"allotments"}},
			"pruned before 2026-12-07T09:00:00Z: released 0 stale reservations; deleted 5 counter windows, 0 reservations, 0 leases, 0 events, finished tasks kept; " +
				"failed steps: allotments"},
		{"recover, reclaim failed", ratelimit.Progress{Job: "recover", Step: "release expired leases", Summary: recovered.String(), Recovery: recovered,
			Failed: []string{"reclaim expired tasks"}},
			"released 2 leases and 0 reservations; failed 0 attempts; cleaned 0 admissions; returned 0 lost allotments; failed steps: reclaim expired tasks"},
		{"prune, none failed", ratelimit.Progress{Job: "prune", Step: "events", Summary: pruned.String(), Prune: pruned}, pruned.String()},
		{"recover, none failed", ratelimit.Progress{Job: "recover", Step: "events", Summary: recovered.String(), Recovery: recovered}, recovered.String()},
		{"no job", ratelimit.Progress{Summary: "made by hand", Failed: []string{"counters"}}, "made by hand"},
	} {
		if got := c.p.Describe(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
