package main

import (
	"testing"

	"github.com/pgadmit/pgadmit/internal/bench"
)

// A workload of Local limits says how many blocks it took and how many of its Local limits the
// database decided before how its calls were combined; one without Local limits says only the
// latter, and one that combined nothing and took no block says nothing.
func TestBenchRowNotes(t *testing.T) {
	t.Parallel()
	combined := bench.Result{ReservesPerStatement: 7.9, ReserveStatementUs: 990,
		SettlesPerStatement: 7.9, SettleStatementUs: 1000, ReserveBusyPercent: 1, SettleBusyPercent: 1, HotPercent: 91}
	local := combined
	local.LocalBlocks, local.LocalInDatabase = 142, 424
	for _, tc := range []struct {
		name string
		r    bench.Result
		want string
	}{
		{"combined", combined, "  (combined: 7.9 reserves in 0.99 ms, 7.9 settles in 1.00 ms per statement; busy 1% and 1%; 91% hot)"},
		{"local", local, "  (local: 142 blocks taken, 424 limits decided in the database; combined: 7.9 reserves in 0.99 ms, 7.9 settles in 1.00 ms per statement; busy 1% and 1%; 91% hot)"},
		{"local, no statement", bench.Result{LocalBlocks: 3}, "  (local: 3 blocks taken, 0 limits decided in the database)"},
		{"local, one of each", bench.Result{LocalBlocks: 1, LocalInDatabase: 1}, "  (local: 1 block taken, 1 limit decided in the database)"},
		{"nothing combined", bench.Result{}, ""},
	} {
		if got := benchRowNotes(tc.r); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
