package main

import (
	"testing"

	"github.com/pgadmit/pgadmit/internal/bench"
)

// A workload of Local limits says how many blocks it took and how many reserves still went to
// the database before how they were combined; one without Local limits says only the latter, and
// one that combined nothing says nothing. Without combining, which counts the reserves, a
// workload of Local limits says only how many blocks it took: not that it sent none.
func TestBenchRowNotes(t *testing.T) {
	t.Parallel()
	combined := bench.Result{ReservesCombined: 424, ReservesPerStatement: 7.9, ReserveStatementUs: 990,
		SettlesPerStatement: 7.9, SettleStatementUs: 1000, ReserveBusyPercent: 1, SettleBusyPercent: 1, HotPercent: 91}
	local := combined
	local.LocalBlocks = 142
	noStatement := bench.Result{LocalBlocks: 3}
	for _, tc := range []struct {
		name      string
		r         bench.Result
		combining bool
		want      string
	}{
		{"combined", combined, true, "  (combined: 7.9 reserves in 0.99 ms, 7.9 settles in 1.00 ms per statement; busy 1% and 1%; 91% hot)"},
		{"local", local, true, "  (local: 142 blocks taken, 424 reserves sent to the database; combined: 7.9 reserves in 0.99 ms, 7.9 settles in 1.00 ms per statement; busy 1% and 1%; 91% hot)"},
		{"local, no statement", noStatement, true, "  (local: 3 blocks taken, 0 reserves sent to the database)"},
		{"local, without combining", noStatement, false, "  (local: 3 blocks taken)"},
		{"nothing combined", bench.Result{}, true, ""},
	} {
		if got := benchRowNotes(tc.r, tc.combining); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
