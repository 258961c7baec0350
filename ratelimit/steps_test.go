package ratelimit

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// rowTable stands in for a table that findStep walks: rows 0..n-1, found
// in order while not yet done; acting on a group that holds a bad row is
// rejected as the server rejects a statement, and changes nothing.
type rowTable struct {
	done, bad map[int]bool
	n, acts   int
	asked     []int32
}

func newRowTable(n int, bad ...int) *rowTable {
	t := &rowTable{done: map[int]bool{}, bad: map[int]bool{}, n: n}
	for _, b := range bad {
		t.bad[b] = true
	}
	return t
}

func (t *rowTable) find(limit int32) ([]int, error) {
	t.asked = append(t.asked, limit)
	var found []int
	for i := 0; i < t.n && len(found) < int(limit); i++ {
		if !t.done[i] {
			found = append(found, i)
		}
	}
	return found, nil
}

func (t *rowTable) act(rows []int) (int64, error) {
	t.acts++
	if slices.ContainsFunc(rows, func(r int) bool { return t.bad[r] }) {
		return 0, &pgconn.PgError{Code: "23514", Message: "check violation"}
	}
	for _, r := range rows {
		t.done[r] = true
	}
	return int64(len(rows)), nil
}

func rowID(r int) [16]byte { return [16]byte{byte(r >> 8), byte(r)} }

// runStep runs a step as runSteps does, to its end.
func runStep(t *testing.T, run batchFunc) error {
	t.Helper()
	for range 1000 {
		more, _, err := run(nil)
		if err != nil || !more {
			return err
		}
	}
	t.Fatal("the step never ended")
	return nil
}

func TestFindStepSetsAsideOnlyTheRowsTheServerRejects(t *testing.T) {
	table := newRowTable(20, 3, 11, 12)
	var changed int64
	err := runStep(t, findStep(8, nil, rowID, table.find, func(rows []int) (int64, error) {
		n, err := table.act(rows)
		changed += n
		return n, err
	}))

	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("step error %v, want the server's rejection", err)
	}
	if changed != 17 {
		t.Errorf("changed %d rows, want the 17 good ones", changed)
	}
	for i := range 20 {
		if table.done[i] == table.bad[i] {
			t.Errorf("row %d: done %v, bad %v", i, table.done[i], table.bad[i])
		}
	}
	// Each batch asks for the rows set aside on top of a batch's worth.
	if want := []int32{8, 9, 11}; !slices.Equal(table.asked, want) {
		t.Errorf("asked for %v rows, want %v", table.asked, want)
	}
}

func TestFindStepActsOnceWhenNothingIsRejected(t *testing.T) {
	table := newRowTable(20)
	if err := runStep(t, findStep(8, nil, rowID, table.find, table.act)); err != nil {
		t.Fatal(err)
	}
	if table.acts != 3 || len(table.done) != 20 {
		t.Errorf("%d acts, %d rows done, want 3 acts (one a batch) doing all 20", table.acts, len(table.done))
	}
}

// A server that rejects every row is not one bad row: the step stops after
// the first batch rather than walk the whole table row by row.
func TestFindStepStopsWhenTheServerRejectsEveryRow(t *testing.T) {
	table := newRowTable(100)
	for i := range 100 {
		table.bad[i] = true
	}
	err := runStep(t, findStep(8, nil, rowID, table.find, table.act))
	if err == nil {
		t.Fatal("no error, want the server's rejection")
	}
	if len(table.asked) != 1 || table.acts != 15 {
		t.Errorf("%d batches and %d acts, want 1 batch of 15 acts (8 rows halved down to each)", len(table.asked), table.acts)
	}
}

// An error no row causes (the connection lost, a deadlock) ends the step
// at once: halving the batch would only meet it again.
func TestFindStepStopsAtAnErrorNotTheServers(t *testing.T) {
	for _, failure := range []error{
		errors.New("connection lost"),
		&pgconn.PgError{Code: "40P01", Message: "deadlock detected"},
	} {
		acts := 0
		err := runStep(t, findStep(8, nil, rowID, newRowTable(20).find, func([]int) (int64, error) {
			acts++
			return 0, failure
		}))
		if !errors.Is(err, failure) || acts != 1 {
			t.Errorf("error %v after %d acts, want %v after 1", err, acts, failure)
		}
	}
}

// A step that stops early on rows the server rejects, with a full batch
// unread, says it left the rest of the step too, as a LockWaitError does;
// one that reached its last row does not.
func TestFindStepSaysWhenRejectionsLeftTheRest(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  []int
		want string
	}{
		{"every row rejected", []int{0, 1, 2, 3, 4, 5}, "left 4 rows the server rejected and the rest of the step:"},
		{"a batch's worth set aside", []int{0, 5, 10, 15}, "left 4 rows the server rejected and the rest of the step:"},
		{"the last row reached", []int{3, 18}, "left 2 rows the server rejected:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := newRowTable(20, tc.bad...)
			err := runStep(t, findStep(4, nil, rowID, table.find, table.act))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("step error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// Rows an earlier step left on a lock wait (passed) are passed over, and a
// step still acts on a batch at most at a time when find does not return
// them (they are not this step's rows): the rows asked for beyond them then
// come back, and are cut to a batch. The rows a step leaves on a lock wait
// go into passed for the steps after it.
func TestFindStepPassesOverRowsLeftOnALockWait(t *testing.T) {
	table := newRowTable(20)
	passed := map[[16]byte]bool{rowID(3): true, rowID(100): true, rowID(101): true, rowID(102): true}
	var groups []int
	err := runStep(t, findStep(4, passed, rowID, table.find, func(rows []int) (int64, error) {
		groups = append(groups, len(rows))
		if slices.Contains(rows, 9) {
			return 0, &pgconn.PgError{Code: "55P03", Message: "lock timeout"}
		}
		return table.act(rows)
	}))
	var lw *LockWaitError
	if !errors.As(err, &lw) || lw.Rows != 4 {
		t.Fatalf("step: %v, want a *LockWaitError for the 4 rows of the batch that waited", err)
	}
	if slices.ContainsFunc(groups, func(n int) bool { return n > 4 }) {
		t.Errorf("acted on groups of %v rows, want a batch (4) at most", groups)
	}
	if table.done[3] {
		t.Error("row 3, passed, was acted on")
	}
	var left []int
	for r := range 20 {
		if !table.done[r] && r != 3 {
			left = append(left, r)
			if !passed[rowID(r)] {
				t.Errorf("row %d left, not passed on to the steps after", r)
			}
		}
	}
	if len(left) != 4 || !slices.Contains(left, 9) {
		t.Errorf("left rows %v, want the 4 of the batch that waited on row 9", left)
	}
}
