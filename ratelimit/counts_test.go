package ratelimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every count a person reads says its noun as English does: "1 reservation", "2 reservations",
// "0 reservations". The lines said "released 1 reservations", and other messages "1 row(s)".
func TestCountsReadAsEnglish(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	timedOut := errors.New("ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)")
	problem := ratelimit.Problem{Kind: ratelimit.ProblemCounterUsed, ScopeType: "api_key", ScopeKey: "k", Metric: "tokens", ExpectedText: "1", ActualText: "2"}
	for _, c := range []struct {
		name, got, want string
	}{
		{"recovery of ones", ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1, ReleasedRateReservations: 1, FailedAttempts: 1, FailedTasks: 1,
			RequeuedAsyncTasks: 1, FailedPoisonTasks: 1, CleanedTaskAdmissions: 1, ReturnedAllotments: 1}.String(),
			"released 1 lease and 1 reservation; failed 1 attempt; requeued 1 async task; failed 1 sync task and 1 poison task; cleaned 1 admission; returned 1 lost allotment"},
		{"recovery of twos", ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 2, ReleasedRateReservations: 2, FailedAttempts: 2, FailedTasks: 2,
			RequeuedAsyncTasks: 2, FailedPoisonTasks: 2, CleanedTaskAdmissions: 2, ReturnedAllotments: 2}.String(),
			"released 2 leases and 2 reservations; failed 2 attempts; requeued 2 async tasks; failed 2 sync tasks and 2 poison tasks; cleaned 2 admissions; returned 2 lost allotments"},
		{"prune of ones", ratelimit.PruneResult{Cutoff: at, TaskCutoff: at.Add(-time.Hour), ReleasedStaleReservations: 1, Counters: 1, Reservations: 1,
			Leases: 1, Allotments: 1, Events: 1, Tasks: 1}.String(),
			"pruned before 2026-12-07T08:00:00Z: released 1 stale reservation; deleted 1 counter window, 1 reservation, 1 allotment, 1 lease, 1 event, 1 task finished before 2026-12-07T07:00:00Z"},
		{"prune of twos", ratelimit.PruneResult{Cutoff: at, TaskCutoff: at.Add(-time.Hour), ReleasedStaleReservations: 2, Counters: 2, Reservations: 2,
			Leases: 2, Allotments: 2, Events: 2, Tasks: 2}.String(),
			"pruned before 2026-12-07T08:00:00Z: released 2 stale reservations; deleted 2 counter windows, 2 reservations, 2 allotments, 2 leases, 2 events, 2 tasks finished before 2026-12-07T07:00:00Z"},
		{"doctor, one problem", firstLine(ratelimit.Report{CheckedAt: at, Problems: []ratelimit.Problem{problem}}.String()), "doctor: 1 problem"},
		{"doctor, two problems, truncated", firstLine(ratelimit.Report{CheckedAt: at, Problems: []ratelimit.Problem{problem, problem}, Truncated: true}.String()),
			"doctor: 2 problems (truncated)"},
		{"lock wait, one row", (&ratelimit.LockWaitError{Rows: 1}).Error(), "ratelimit: left 1 row: another transaction held a lock past the lock timeout"},
		{"lock wait, two rows and the rest", (&ratelimit.LockWaitError{Rows: 2, Rest: true, Err: timedOut}).Error(),
			"ratelimit: left 2 rows and the rest of the step: another transaction held a lock past the lock timeout: " + timedOut.Error()},
		{"one lease lost", (&ratelimit.LeaseLostError{LeaseIDs: []string{"a"}, Renewed: 1}).Error(),
			"ratelimit: concurrency lease lost: 1 lease expired or released (a); renewed 1"},
		{"two leases lost", (&ratelimit.LeaseLostError{LeaseIDs: []string{"a", "b"}, Renewed: 2}).Error(),
			"ratelimit: concurrency lease lost: 2 leases expired or released (a, b); renewed 2"},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
	}
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
