package ratelimit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// Progress counts the batches that committed: not one that timed out on a
// lock and rolled back whole, but the last one of a step that ends with the
// rows it left, when it committed the rest.
func TestRunStepsReportsOnlyCommittedBatches(t *testing.T) {
	table := newRowTable(10)
	acts := 0
	first := findStep(4, nil, rowID, table.find, func(rows []int) (int64, error) {
		if acts++; acts == 1 {
			return 0, lockTimedOutErr // rows 0-3, rolled back
		}
		return table.act(rows) // rows 4-7, then 8-9
	})
	var reports []int     // rows done at each report
	var failed [][]string // the steps failed so far at each report
	lease := &jobLease{m: &Maintenance{opts: maintenanceOptions{leaseTTL: time.Hour}}, renewed: time.Now()}
	err := runSteps(context.Background(), "recover", lease, []step{{"first", first}}, func(_ string, f []string) {
		reports = append(reports, len(table.done))
		failed = append(failed, f)
	})
	var lw *LockWaitError
	if !errors.As(err, &lw) || lw.Rows != 4 {
		t.Fatalf("run error %v, want a LockWaitError for the 4 rows of the first batch", err)
	}
	if want := []int{4, 6}; !slices.Equal(reports, want) {
		t.Errorf("progress reported after batches with %v rows done, want %v: the two that committed", reports, want)
	}
	// The step ends with the rows it left in its last batch: that report
	// names it as failed, the one before does not.
	if len(failed) != 2 || len(failed[0]) != 0 || !slices.Equal(failed[1], []string{"first"}) {
		t.Errorf("progress reported the failed steps %q, want none, then first", failed)
	}
}
