package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The updates that every admission, settlement and block report makes are
// heap-only (HOT): they change no column that an index names (as a key, an
// INCLUDE column or in a predicate), so PostgreSQL writes no index entry
// for them and reclaims their old versions on the page, vacuum or not.
// Those are the counter updates of every reserve, settle and block
// function, a block's report (AllotmentSync) and trim, and a running
// task's event sequence (AppendEvent) and heartbeat. An index that named
// reserved_value, used_value, limit_value or updated_at of the counters,
// consumed, synced_at or granted of the blocks, or last_event_seq,
// heartbeat_at, execution_lease_expires_at or updated_at of the tasks
// would make each of them write every index of its table again; this test
// fails then (a heartbeat did while the partial index of running tasks was
// keyed on the lease's expiry: schema/00022_hot_heartbeats.sql).
// (Settling a reservation, releasing or renewing a lease, claiming or
// finishing a task and returning a block are not HOT: each changes a
// column of a partial index of live rows, or an expiry an index is keyed
// on, that recovery, prune or admission reads.)
func TestHotPathUpdatesAreHeapOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	// Each step runs in a transaction of its own, and what it wrote is read
	// from that transaction's statistics (pg_stat_xact_user_tables), before
	// and after it: the counts can also hold earlier transactions' of the
	// session that were not yet flushed. l and tx are the step's.
	var (
		l  *ratelimit.Limiter
		tx pgx.Tx
	)
	inTx := func(do func()) map[string][2]int64 {
		t.Helper()
		var err error
		if tx, err = pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		l = limiter.WithTx(tx)
		before := hotWrites(t, tx)
		do()
		writes := hotWrites(t, tx)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for table, w := range writes {
			writes[table] = [2]int64{w[0] - before[table][0], w[1] - before[table][1]}
		}
		return writes
	}
	heapOnly := func(step, table string, do func()) {
		t.Helper()
		writes := inTx(do)
		updated, hot := writes[table][0], writes[table][1]
		if updated == 0 || hot != updated {
			t.Errorf("%s: %d updates of %s, %d of them HOT; want every one HOT (at least one)", step, updated, table, hot)
		}
	}

	const counters = "gateway_rate_limit_counters"
	// A window with room for the whole test: each step must update the counter row an earlier
	// one inserted, and a minute's window that ended between two steps made the second insert
	// a row of the next window (0 updates, "want at least one").
	hour := hourWindow(t, pool)
	hourSeconds := int32(hour / time.Second)
	requests := ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "hot"}, Metric: ratelimit.MetricRequests,
		Limit: 1000, Amount: 1, Window: hour}
	tokens := ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "hot"}, Metric: ratelimit.MetricTokens,
		Limit: 100000, Amount: 500, Window: hour}
	model := ratelimit.Limit{Scope: ratelimit.Scope{Type: "model", Key: "hot"}, Metric: ratelimit.MetricConcurrent,
		Limit: 10, Amount: 1, LeaseTTL: time.Minute}
	reserve := func(limits ...ratelimit.Limit) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return g
	}
	commit := func(g ratelimit.Grant) {
		t.Helper()
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}

	// pgadmit_reserve_one and pgadmit_settle_one (one window limit).
	var first ratelimit.Grant
	inTx(func() { first = reserve(requests) }) // creates the counter row: an insert
	heapOnly("pgadmit_reserve_one", counters, func() { reserve(requests) })
	heapOnly("pgadmit_settle_one", counters, func() { commit(first) })

	// pgadmit_reserve and pgadmit_settle (several limits, a lease among them).
	inTx(func() { reserve(tokens) }) // creates the tokens counter
	var several ratelimit.Grant
	heapOnly("pgadmit_reserve", counters, func() { several = reserve(requests, tokens, model) })
	heapOnly("pgadmit_settle", counters, func() { commit(several) })

	// pgadmit_reserve_windows, the combined batch of one-window admissions.
	heapOnly("pgadmit_reserve_windows", counters, func() {
		rows, err := queries.AdmissionReserveWindows(ctx, tx, db.AdmissionReserveWindowsParams{
			ScopeTypes: []string{"api_key", "api_key"}, ScopeKeys: []string{"hot", "hot"},
			Metrics: []string{ratelimit.MetricRequests, ratelimit.MetricRequests}, WindowSeconds: []int32{hourSeconds, hourSeconds},
			LimitValues: []float64{1000, 1000}, Amounts: []float64{1, 1},
		})
		if err != nil || len(rows) != 2 || !rows[0].Fits || !rows[1].Fits {
			t.Fatalf("AdmissionReserveWindows = %+v, %v; want both admitted", rows, err)
		}
	})

	// Blocks of a Local limit: taking one (pgadmit_allot), reporting it,
	// trimming it while taking the next, and returning them
	// (pgadmit_allot_return). A block's return is not HOT (returned_at
	// leaves the partial index of open blocks): only its counter is asked.
	const blocks = "gateway_rate_limit_allotments"
	take := func(trim pgtype.UUID, trimTo string) pgtype.UUID {
		t.Helper()
		row, err := queries.AllotmentTake(ctx, tx, db.AllotmentTakeParams{
			Holder: "holder", ScopeType: "model", ScopeKey: "hot-local", Metric: ratelimit.MetricTokens,
			WindowSeconds: hourSeconds, LimitValue: 100000, Want: 1000, Need: 1,
			TrimID: trim, TrimTo: pgtype.Text{String: trimTo, Valid: trim.Valid},
		})
		if err != nil || !row.AllotmentID.Valid {
			t.Fatalf("AllotmentTake = %+v, %v; want a block", row, err)
		}
		return row.AllotmentID
	}
	var block, next pgtype.UUID
	inTx(func() { block = take(pgtype.UUID{}, "") }) // creates the counter row
	heapOnly("pgadmit_allot", counters, func() { next = take(pgtype.UUID{}, "") })
	heapOnly("AllotmentSync", blocks, func() {
		row, err := queries.AllotmentSync(ctx, tx, db.AllotmentSyncParams{Ids: []pgtype.UUID{block}, Consumed: []string{"300"}})
		if err != nil || row.Synced != 1 {
			t.Fatalf("AllotmentSync = %+v, %v; want one block reported", row, err)
		}
	})
	heapOnly("pgadmit_allot trimming a block", blocks, func() { take(block, "300") })
	heapOnly("pgadmit_allot_return", counters, func() {
		rows, err := queries.AllotmentReturn(ctx, tx, db.AllotmentReturnParams{
			Ids: []pgtype.UUID{block, next}, Used: []string{"300", "0"}, Reasons: []string{"test", "test"},
		})
		if err != nil || len(rows) != 2 || !rows[0].Returned || !rows[1].Returned {
			t.Fatalf("AllotmentReturn = %+v, %v; want both returned", rows, err)
		}
	})

	// A running task's event (its sequence number) and heartbeat.
	var task ratelimit.Task
	inTx(func() {
		var err error
		if task, err = l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "worker"}); err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
	})
	heapOnly("AppendEvent", "gateway_tasks", func() {
		if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress"}); err != nil {
			t.Fatalf("AppendEvent: %v", err)
		}
	})
	heapOnly("TaskHeartbeat", "gateway_tasks", func() {
		if _, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute); err != nil {
			t.Fatalf("HeartbeatTask: %v", err)
		}
	})
}

// hotWrites returns, per pgadmit table, how many rows the transaction has
// updated so far and how many of those updates were HOT.
func hotWrites(t *testing.T, tx pgx.Tx) map[string][2]int64 {
	t.Helper()
	rows, err := testq.TupleWritesInTransaction(context.Background(), tx)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string][2]int64, len(rows))
	for _, r := range rows {
		m[r.TableName] = [2]int64{r.Updated, r.HotUpdated}
	}
	return m
}
