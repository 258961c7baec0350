package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// TaskCreate counts the admissions of each queue scope it names. The
// planner took its array of scopes for a thousand rows (generate_subscripts
// has no row estimate), so once a queue held a few hundred tasks it costed
// the statement above jit_above_cost and compiled it to machine code on
// every task created: 90–170 ms a task where the statement runs in 1–9 ms
// (with 250 admissions a scope; PostgreSQL's JIT is on by default). Its
// time with JIT on must stay that of JIT off.
func TestTaskCreateOnALongQueueIsNotCompiled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := testq.FixtureFillQueue(ctx, pool, 30_000); err != nil { // 300 admissions in each of 100 scopes
		t.Fatalf("FixtureFillQueue: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	// The fastest of a few runs: a loaded host slows a run, never speeds it.
	fastest := func(jit string) time.Duration {
		best := time.Duration(1<<63 - 1)
		for range 5 {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := testq.JitForTransaction(ctx, tx, jit); err != nil {
				t.Fatalf("JitForTransaction: %v", err)
			}
			start := time.Now()
			row, err := queries.TaskCreate(ctx, tx, db.TaskCreateParams{
				ScopeTypes: []string{"fixture_queue"}, ScopeKeys: []string{"q7"}, LimitValues: []float64{1e6},
				AsyncMode: true, Kind: "fixture", Payload: "{}",
			})
			took := time.Since(start)
			_ = tx.Rollback(ctx)
			if err != nil || !row.Admitted {
				t.Fatalf("TaskCreate = %+v, %v; want the task admitted", row, err)
			}
			best = min(best, took)
		}
		return best
	}
	off := fastest("off")
	on := fastest("on")
	if on > off+30*time.Millisecond {
		t.Errorf("TaskCreate took %v with JIT on, %v with JIT off: compiled on each call", on, off)
	}
}
