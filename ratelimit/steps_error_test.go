package ratelimit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// stepErrors lists the *StepErrors that err holds, however joined, in order.
func stepErrors(err error) []*StepError {
	if se, ok := err.(*StepError); ok {
		return []*StepError{se}
	}
	var found []*StepError
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			found = append(found, stepErrors(e)...)
		}
	case interface{ Unwrap() error }:
		found = stepErrors(u.Unwrap())
	}
	return found
}

// Each step that ends with an error is named in the run's error by a
// *StepError (Job, Step), one per step, so that a caller can tell the steps
// that failed from those that ran and found nothing; the steps that ran
// whole have none. The one the run stopped at names the steps after it,
// which did not run (NotRun). What each says, and what errors.Is and errors.As find in
// it, is the step's error as it was: the server's reason, a LockWaitError,
// the error that cut the run off.
func TestRunStepsNamesEachFailedStep(t *testing.T) {
	missing := &pgconn.PgError{Code: "42P01", Message: `relation "gateway_rate_limit_allotments" does not exist`}
	ok := func(error) (bool, bool, error) { return false, true, nil }
	rejected := func(stop error) (bool, bool, error) {
		if stop != nil {
			return false, false, stop
		}
		return false, false, missing
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	table := newRowTable(20)
	acts := 0
	cutOff := findStep(4, nil, rowID, table.find, func(rows []int) (int64, error) {
		if acts++; acts == 1 {
			return 0, lockTimedOutErr
		}
		return table.act(rows)
	})
	lease := &jobLease{m: &Maintenance{opts: maintenanceOptions{leaseTTL: time.Hour}}, renewed: time.Now()}
	var reported []string
	err := runSteps(ctx, "prune", lease, []step{
		{"counters", ok},
		{"allotments", rejected},
		{"reservations", ok},
		{"events", cutOff},
		{"tasks", ok},
	}, func(s string, failed []string) {
		reported = append(reported, s+" "+strings.Join(failed, ","))
		if s == "events" {
			cancel() // after its second batch: the run stops before its third
		}
	})
	// Each report names the steps that failed so far: none before
	// allotments, which the server rejected before a batch was done.
	if want := []string{"counters ", "reservations allotments", "events allotments"}; !slices.Equal(reported, want) {
		t.Errorf("progress reported %q (step, then the steps failed so far), want %q", reported, want)
	}

	var got []string
	for _, se := range stepErrors(err) {
		if se.Job != "prune" {
			t.Errorf("StepError %q: Job %q, want prune", se, se.Job)
		}
		// The run goes on past the server's rejection, and stops where ctx ended.
		if want := map[string][]string{"events": {"tasks"}}[se.Step]; !slices.Equal(se.NotRun, want) {
			t.Errorf("StepError of %s: NotRun %q, want %q", se.Step, se.NotRun, want)
		}
		got = append(got, se.Step)
	}
	if want := []string{"allotments", "events"}; !slices.Equal(got, want) {
		t.Errorf("StepErrors of %v name %q, want %q", err, got, want)
	}
	want := errors.Join(
		wrapDBError(ctx, "prune: allotments", missing),
		stepError(ctx, "prune", "events", 0, &cutShort{err: context.Canceled, left: &LockWaitError{Rows: 4, Err: lockTimedOutErr}}),
	)
	if err == nil || err.Error() != want.Error() {
		t.Errorf("run error %q, want what the steps' errors said before, %q", err, want)
	}
	var lw *LockWaitError
	var se *StepError
	if !errors.Is(err, missing) || !errors.Is(err, context.Canceled) || !errors.As(err, &lw) || lw.Step != "events" ||
		!errors.As(err, &se) || se.Step != "allotments" || !errors.Is(se, missing) {
		t.Errorf("run error %v: the server's error, ctx's, the LockWaitError of events and the StepError of allotments are not all found", err)
	}
}
