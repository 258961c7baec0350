package servertime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pgadmit/pgadmit/db"
)

// ownPrefix starts the text of the statements Prepare and Take run (BenchStatement* in
// queries/bench.sql), which Since leaves out: they are the measurement, not what is measured.
const ownPrefix = "-- name: BenchStatement"

// key identifies a statement in pg_stat_statements, within one role and database: the same
// query id is counted apart when it runs top-level and nested.
type key struct {
	queryID  int64
	topLevel bool
}

// Snapshot is the cumulative statistics of every statement the current role ran in the
// current database, at one moment.
type Snapshot struct {
	rows map[key]db.BenchStatementStatsRow
}

// Take reads a snapshot on conn (see Prepare).
func Take(ctx context.Context, conn db.DBTX) (Snapshot, error) {
	rows, err := db.New().BenchStatementStats(ctx, conn)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	s := Snapshot{rows: make(map[key]db.BenchStatementStatsRow, len(rows))}
	for _, r := range rows {
		s.rows[key{r.Queryid, r.Toplevel}] = r
	}
	return s, nil
}

// Statement is what one statement cost the server over some time.
type Statement struct {
	QueryID  int64 `json:"queryid"`
	TopLevel bool  `json:"toplevel"`
	// Name is the sqlc name of a pgadmit statement (from the "-- name:" comment its text
	// starts with), else the start of its text.
	Name string `json:"name"`
	// Function is, for a nested statement, the pgadmit function whose body it is part of; for a
	// top-level one, the pgadmit function it calls; "" when unknown or none (see Attribute).
	Function string `json:"function,omitempty"`
	Calls    int64  `json:"calls"`
	Plans    int64  `json:"plans"` // times it was planned
	Rows     int64  `json:"rows"`
	// PlanMs and ExecMs are the total planning and execution time, in milliseconds. A
	// top-level statement's execution includes that of the statements nested in it.
	PlanMs float64 `json:"total_plan_ms"`
	ExecMs float64 `json:"total_exec_ms"`
	// MeanPlanUs and MeanExecUs are per call, in microseconds: planning per call is low when
	// plans are reused.
	MeanPlanUs float64 `json:"mean_plan_us"`
	MeanExecUs float64 `json:"mean_exec_us"`
	// Query is the statement's text as pg_stat_statements keeps it (constants as $n).
	Query string `json:"query"`
}

// TotalMs returns the statement's planning plus execution time, in milliseconds.
func (s Statement) TotalMs() float64 { return s.PlanMs + s.ExecMs }

// Since returns what ran between before and s, one Statement per statement that ran (or was
// planned), most server time first. A statement pg_stat_statements evicted and counted again
// in between counts from zero. This package's own statements are left out.
func (s Snapshot) Since(before Snapshot) []Statement {
	var out []Statement
	for k, a := range s.rows {
		if strings.HasPrefix(a.Query, ownPrefix) {
			continue
		}
		d := Statement{QueryID: k.queryID, TopLevel: k.topLevel, Query: a.Query,
			Calls: a.Calls, Plans: a.Plans, Rows: a.Rows, PlanMs: a.TotalPlanMs, ExecMs: a.TotalExecMs}
		if b, ok := before.rows[k]; ok && b.Calls <= a.Calls && b.Plans <= a.Plans {
			d.Calls -= b.Calls
			d.Plans -= b.Plans
			d.Rows -= b.Rows
			d.PlanMs -= b.TotalPlanMs
			d.ExecMs -= b.TotalExecMs
		}
		if d.Calls == 0 && d.Plans == 0 {
			continue
		}
		out = append(out, d.finish())
	}
	sortByTime(out)
	return out
}

// Add returns the statements of a and b, those of the same statement added up, most server
// time first: the cost of two runs.
func Add(a, b []Statement) []Statement {
	at := make(map[key]int, len(a))
	out := slices.Clone(a)
	for i, s := range out {
		at[key{s.QueryID, s.TopLevel}] = i
	}
	for _, s := range b {
		i, ok := at[key{s.QueryID, s.TopLevel}]
		if !ok {
			at[key{s.QueryID, s.TopLevel}] = len(out)
			out = append(out, s)
			continue
		}
		t := &out[i]
		t.Calls += s.Calls
		t.Plans += s.Plans
		t.Rows += s.Rows
		t.PlanMs += s.PlanMs
		t.ExecMs += s.ExecMs
		*t = t.finish()
	}
	sortByTime(out)
	return out
}

// TopLevelMs returns the server time of the top-level statements among ss, in milliseconds:
// all the time they took, nested statements included once.
func TopLevelMs(ss []Statement) float64 {
	var ms float64
	for _, s := range ss {
		if s.TopLevel {
			ms += s.TotalMs()
		}
	}
	return ms
}

// finish fills in the derived fields: the name and the means.
func (s Statement) finish() Statement {
	s.Name = nameOf(s.Query)
	s.MeanPlanUs, s.MeanExecUs = 0, 0
	if s.Calls > 0 {
		s.MeanPlanUs = s.PlanMs * 1000 / float64(s.Calls)
		s.MeanExecUs = s.ExecMs * 1000 / float64(s.Calls)
	}
	return s
}

func sortByTime(ss []Statement) {
	slices.SortFunc(ss, func(x, y Statement) int {
		if c := cmp.Compare(y.TotalMs(), x.TotalMs()); c != 0 {
			return c
		}
		if x.TopLevel != y.TopLevel {
			if x.TopLevel {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.QueryID, y.QueryID)
	})
}
