package servertime

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/db"
)

func snapshot(rows ...db.BenchStatementStatsRow) Snapshot {
	s := Snapshot{rows: map[key]db.BenchStatementStatsRow{}}
	for _, r := range rows {
		s.rows[key{r.Queryid, r.Toplevel}] = r
	}
	return s
}

func TestSinceAndAdd(t *testing.T) {
	t.Parallel()
	const reserve = "-- name: AdmissionReserveOne :one\n..."
	before := snapshot(
		db.BenchStatementStatsRow{Queryid: 1, Toplevel: true, Calls: 10, Plans: 2, TotalPlanMs: 1, TotalExecMs: 5, Rows: 10, Query: reserve},
		db.BenchStatementStatsRow{Queryid: 1, Toplevel: false, Calls: 4, Plans: 4, TotalPlanMs: 1, TotalExecMs: 1, Query: reserve},
		db.BenchStatementStatsRow{Queryid: 2, Toplevel: true, Calls: 7, TotalExecMs: 7, Query: "statement idle"},
		db.BenchStatementStatsRow{Queryid: 3, Toplevel: true, Calls: 50, TotalExecMs: 50, Query: "statement evicted"},
	)
	after := snapshot(
		db.BenchStatementStatsRow{Queryid: 1, Toplevel: true, Calls: 110, Plans: 3, TotalPlanMs: 2, TotalExecMs: 45, Rows: 110, Query: reserve},
		db.BenchStatementStatsRow{Queryid: 1, Toplevel: false, Calls: 4, Plans: 4, TotalPlanMs: 1, TotalExecMs: 1, Query: reserve},
		db.BenchStatementStatsRow{Queryid: 2, Toplevel: true, Calls: 7, TotalExecMs: 7, Query: "statement idle"},
		db.BenchStatementStatsRow{Queryid: 3, Toplevel: true, Calls: 2, TotalExecMs: 60, Query: "statement evicted"},
		db.BenchStatementStatsRow{Queryid: 4, Toplevel: false, Calls: 100, Plans: 1, TotalPlanMs: 0.5, TotalExecMs: 10, Query: "statement t"},
		db.BenchStatementStatsRow{Queryid: 5, Toplevel: true, Calls: 3, TotalExecMs: 900, Query: "-- name: BenchStatementStats :many\n..."},
	)
	got := after.Since(before)
	want := []Statement{
		{QueryID: 3, TopLevel: true, Name: "statement evicted", Calls: 2, ExecMs: 60, MeanExecUs: 30000, Query: "statement evicted"},
		{QueryID: 1, TopLevel: true, Name: "AdmissionReserveOne", Calls: 100, Plans: 1, Rows: 100, PlanMs: 1, ExecMs: 40, MeanPlanUs: 10, MeanExecUs: 400, Query: reserve},
		{QueryID: 4, Name: "statement t", Calls: 100, Plans: 1, PlanMs: 0.5, ExecMs: 10, MeanPlanUs: 5, MeanExecUs: 100, Query: "statement t"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Since (-want +got):\n%s", diff)
	}
	if ms := TopLevelMs(got); ms != 101 {
		t.Errorf("TopLevelMs = %v, want 101 (60 + 41, nested not counted)", ms)
	}

	sum := Add(got, got[1:2])
	if len(sum) != 3 || sum[0].Name != "AdmissionReserveOne" || sum[0].Calls != 200 || sum[0].MeanExecUs != 400 || sum[0].TotalMs() != 82 {
		t.Errorf("Add: %+v", sum)
	}
	if got[1].Calls != 100 {
		t.Errorf("Add changed its argument")
	}
}
