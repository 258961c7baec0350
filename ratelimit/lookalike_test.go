package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit's functions, and the statements of queries/*.sql, run with their caller's privileges
// and resolve what they call through the caller's search_path, where pg_catalog comes first but a
// function or operator of another schema wins when it matches a call exactly and pg_catalog's
// needs a cast or is polymorphic: a role that may create in a schema on the path (public, before
// PostgreSQL 15) ran code of its choosing as every gateway. Each schema lookalike_<what>
// (OpsPlantLookalikes) holds a lookalike of such a call, of a function's (schema/00021) or a
// statement's (docs/lookalikes.md); a gateway whose search_path has it after pgadmit's schema
// creates, claims, heartbeats, unclaims, cancels and finishes tasks, reserves (one limit, several
// with a task, combined batches, a hot batch, a Local limit), checks, attaches, renews and
// commits, takes, reports and trims a block, inspects, recovers, prunes and runs the doctor, and
// every call runs pg_catalog's functions: none of the lookalikes, which fail the statement that
// runs them. Each call is made where the lookalike would run (on a row it reads or writes), not
// only planned.
func TestFunctionsIgnoreLookalikesOutsideTheirSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	admin := pgtest.OpenPool(t, url)
	if err := testq.OpsPlantLookalikes(ctx, admin); err != nil {
		t.Fatal(err)
	}
	schemas, err := testq.OpsLookalikeSchemas(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(schemas) != 20 {
		t.Fatalf("OpsPlantLookalikes made %d schemas: %v", len(schemas), schemas)
	}
	for _, schema := range schemas {
		t.Run(schema, func(t *testing.T) {
			gatewayCallsWithLookalikes(t, pgtest.OpenPool(t, url+"&search_path=public,"+schema))
		})
	}
}

// gatewayCallsWithLookalikes runs, on pool, a call of each of pgadmit's functions and of each
// statement that calls a built-in, and reports each that fails.
func gatewayCallsWithLookalikes(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	l := ratelimit.New(pool)
	defer l.Close()
	key := uniqueKey("lookalike")
	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricTokens, Limit: 100, Amount: 60, Window: time.Hour},
		{Scope: ratelimit.Scope{Type: "model", Key: key}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1},
	}
	text := func(s string) pgtype.Text { return pgtype.Text{String: s, Valid: true} }
	// TaskAdmissionLockScopes, TaskCreate (a queue scope counted against its limit).
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", QueueLimits: []ratelimit.Limit{queueLimit(key, 10)}})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	// pgadmit_reserve (two limits, a task: pgadmit_task_recheck, pgadmit_task_fence_key).
	grant, err := l.Reserve(ctx, task.ID, "", limits)
	if err != nil {
		t.Fatalf("Reserve of a window and a concurrency limit: %v", err)
	}
	// InspectLeases, InspectAdmissions (pgadmit inspect), on the lease and the queue admission.
	leases, err := queries.InspectLeases(ctx, pool, db.InspectLeasesParams{ScopeType: text("model"), ScopeKey: text(key), MaxRows: 10})
	if err != nil || len(leases) != 1 || leases[0].LiveLeases != 1 {
		t.Errorf("InspectLeases = %+v, %v; want one live lease", leases, err)
	}
	admitted, err := queries.InspectAdmissions(ctx, pool, db.InspectAdmissionsParams{ScopeType: text("queue"), ScopeKey: text(key), MaxRows: 10})
	if err != nil || len(admitted) != 1 || admitted[0].Running != 1 {
		t.Errorf("InspectAdmissions = %+v, %v; want one running task", admitted, err)
	}
	// LeaseLockScopes, then pgadmit_renew_leases.
	if renewed, err := l.RenewLeases(ctx, grant.Leases); err != nil || len(renewed) != 1 {
		t.Errorf("RenewLeases = %d leases, %v; want 1", len(renewed), err)
	}
	// CounterCheckWindows.
	if err := l.Check(ctx, []ratelimit.Limit{limits[0], {Scope: ratelimit.Scope{Type: "api_key", Key: key + "/check"}, Metric: ratelimit.MetricTokens, Limit: 100, Amount: 10, Window: time.Hour}}); err != nil {
		var exceeded *ratelimit.ExceededError
		if !errors.As(err, &exceeded) {
			t.Errorf("Check: %v", err)
		}
	}
	// AttemptAttachGrant: a grant reserved without a task, attached to the task's attempt.
	attached, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
		window("api_key", key+"/attach", ratelimit.MetricTokens, 100, 10), concurrent("model", key+"/attach", 1)})
	if err != nil {
		t.Fatalf("Reserve to attach: %v", err)
	}
	if _, err := l.Attach(ctx, task.AttemptID, attached); err != nil {
		t.Errorf("Attach: %v", err)
	}
	// pgadmit_settle.
	if _, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 40}); err != nil {
		t.Errorf("Commit: %v", err)
	}
	// TaskFinishPlan (the attached grant's reservation and lease), TaskFinish (a reservation
	// for the task that a Reserve committed after the plan: late), TaskReleaseIfFinished.
	finisher := ratelimit.New(pool, ratelimit.WithFinishTaskHooks(func() {
		if _, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", key+"/late", ratelimit.MetricTokens, 100, 10)}); err != nil {
			t.Errorf("Reserve for the task between FinishTask's plan and batch: %v", err)
		}
	}, nil))
	defer finisher.Close()
	res, err := finisher.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: "succeeded"})
	if err != nil || res.ReleasedReservations != 2 || res.ReleasedLeases != 1 {
		t.Errorf("FinishTask = %+v, %v; want the attached and the late reservation and the attached lease released", res, err)
	}
	// TaskClaimNext, TaskHeartbeat, TaskUnclaim (the statement of a claim whose caller left),
	// then TaskCancel; TaskCancelAbandoned (of a creation whose caller left).
	async, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "lookalike"})
	if err != nil {
		t.Fatalf("CreateTask(async): %v", err)
	}
	claimed, err := l.ClaimTask(ctx, "w", time.Minute)
	if err != nil || claimed.ID != async.ID {
		t.Fatalf("ClaimTask = %s, %v; want %s", claimed.ID, err, async.ID)
	}
	if _, err := l.HeartbeatTask(ctx, claimed.ID, claimed.ExecutionToken, time.Minute); err != nil {
		t.Errorf("HeartbeatTask: %v", err)
	}
	if n, err := queries.TaskUnclaim(ctx, pool, db.TaskUnclaimParams{TaskID: mustUUID(t, claimed.ID), Token: mustUUID(t, claimed.ExecutionToken)}); err != nil || n != 1 {
		t.Errorf("TaskUnclaim = %d, %v; want 1", n, err)
	}
	if _, err := l.CancelTask(ctx, async.ID, "lookalike"); err != nil {
		t.Errorf("CancelTask: %v", err)
	}
	// TaskCancel of a task holding a reservation its plan did not read (late), the statement
	// alone: the Limiter's CancelTask reads the task's reservations first.
	cancelled, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "lookalike"})
	if err != nil {
		t.Fatalf("CreateTask(async): %v", err)
	}
	held, err := l.Reserve(ctx, cancelled.ID, "", []ratelimit.Limit{window("api_key", key+"/queued", ratelimit.MetricTokens, 100, 10)})
	if err != nil {
		t.Fatalf("Reserve for a queued task: %v", err)
	}
	row, err := queries.TaskCancel(ctx, pool, db.TaskCancelParams{TaskID: mustUUID(t, cancelled.ID), PlannedReservationIds: []pgtype.UUID{}})
	if err != nil || len(row.LateReservationIds) != 1 {
		t.Errorf("TaskCancel = %+v, %v; want the task's reservation late", row, err)
	}
	if _, err := l.Release(ctx, held, "task_finished"); err != nil {
		t.Errorf("Release: %v", err)
	}
	abandoned, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "lookalike"})
	if err != nil {
		t.Fatalf("CreateTask(async): %v", err)
	}
	if n, err := queries.TaskCancelAbandoned(ctx, pool, db.TaskCancelAbandonedParams{TaskID: mustUUID(t, abandoned.ID)}); err != nil || n != 1 {
		t.Errorf("TaskCancelAbandoned = %d, %v; want 1", n, err)
	}
	// pgadmit_reserve_one.
	one := window("api_key", key+"/one", ratelimit.MetricTokens, 100, 60)
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{one}); err != nil {
		t.Errorf("Reserve of one window: %v", err)
	}
	// pgadmit_reserve_windows, every admission fitting, then settled in one batch.
	grants, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{
		{Limits: []ratelimit.Limit{window("api_key", key+"/a", ratelimit.MetricTokens, 100, 10)}},
		{Limits: []ratelimit.Limit{window("api_key", key+"/b", ratelimit.MetricTokens, 100, 10)}},
	})
	if err = errors.Join(append(errs, err)...); err != nil {
		t.Errorf("ReserveCombined of windows that fit: %v", err)
	} else if _, err := l.CommitCombined(ctx, grants); err != nil {
		t.Errorf("CommitCombined: %v", err)
	}
	// A hot batch on one counter that does not take it whole: pgadmit_reserve_windows hands
	// it to pgadmit_reserve, which refuses the second admission; pgadmit_hot_commit.
	hot := window("api_key", key+"/hot", ratelimit.MetricTokens, 100, 60)
	_, errs, err = l.ReserveCombined(ctx, []ratelimit.BatchRequest{{Limits: []ratelimit.Limit{hot}}, {Limits: []ratelimit.Limit{hot}}})
	var exceeded *ratelimit.ExceededError
	if err != nil || len(errs) != 2 || errs[0] != nil || !errors.As(errs[1], &exceeded) {
		t.Errorf("ReserveCombined of a counter's 60 and 60 of 100 = %v, %v; want a grant, then ExceededError", errs, err)
	}

	// pgadmit_allot, then pgadmit_allot_return when the Limiter closes.
	local := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	lw := localWindow(hourWindow(t, pool), key+"/local", 1e6, 1)
	g, err := local.Reserve(ctx, "", "", []ratelimit.Limit{lw})
	local.Close()
	if err != nil {
		t.Fatalf("Reserve of a Local limit: %v", err)
	}
	if !g.Reservations[0].Local {
		t.Errorf("Reserve of a Local limit decided in the database, not from a block")
	}
	blocks, err := testq.AllotmentListByScope(ctx, pool, dbtest.AllotmentListByScopeParams{ScopeType: lw.Scope.Type, ScopeKey: lw.Scope.Key})
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].ReturnedAt == nil {
		t.Errorf("blocks of the Local limit after Close = %+v; want one, returned", blocks)
	}

	// AllotmentTake, AllotmentSync, AllotmentTrim, of a block no Limiter holds: a holder that
	// died, whose block RecoveryAllotmentReturnLost returns below.
	lost := db.AllotmentTakeParams{Holder: "lookalike", ScopeType: "model", ScopeKey: key + "/lost", Metric: ratelimit.MetricTokens,
		WindowSeconds: 3600, LimitValue: 100, Want: 10, Need: 1}
	block, err := queries.AllotmentTake(ctx, pool, lost)
	if err != nil || !block.AllotmentID.Valid {
		t.Fatalf("AllotmentTake = %+v, %v; want a block", block, err)
	}
	if row, err := queries.AllotmentSync(ctx, pool, db.AllotmentSyncParams{Ids: []pgtype.UUID{block.AllotmentID}, Consumed: []string{"3"}}); err != nil || row.Synced != 1 {
		t.Errorf("AllotmentSync = %+v, %v; want the block synced", row, err)
	}
	if err := queries.AllotmentTrim(ctx, pool, db.AllotmentTrimParams{Holder: lost.Holder, ScopeType: lost.ScopeType, ScopeKey: lost.ScopeKey,
		Metric: lost.Metric, WindowSeconds: lost.WindowSeconds, LimitValue: lost.LimitValue, TrimID: block.AllotmentID, TrimTo: "5"}); err != nil {
		t.Errorf("AllotmentTrim: %v", err)
	}

	// Recover, two hours on: RecoveryTaskFindExpired (a task holding an open reservation),
	// RecoveryTaskReclaim, RecoveryAllotmentReturnLost; then Prune: PruneReservationFindStale
	// (the reservations never settled above), PruneCounters; then the doctor.
	expiring, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if _, err := l.Reserve(ctx, expiring.ID, "", []ratelimit.Limit{window("api_key", key+"/expiring", ratelimit.MetricTokens, 100, 10)}); err != nil {
		t.Fatalf("Reserve for the task that expires: %v", err)
	}
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	if rec, err := m.Recover(ctx); err != nil || rec.FailedTasks < 1 || rec.ReleasedRateReservations < 1 || rec.ReturnedAllotments < 1 {
		t.Errorf("Recover = %+v, %v; want the expired task failed, its reservation released and the lost block returned", rec, err)
	}
	if res, err := m.Prune(ctx, time.Minute); err != nil || res.ReleasedStaleReservations < 1 || res.Counters < 1 {
		t.Errorf("Prune = %+v, %v; want stale reservations released and counters pruned", res, err)
	}
	if _, err := m.Doctor(ctx); err != nil {
		t.Errorf("Doctor: %v", err)
	}
	// BenchFunctionSources (servertime, pgadmit bench).
	if sources, err := queries.BenchFunctionSources(ctx, pool); err != nil || len(sources) == 0 {
		t.Errorf("BenchFunctionSources = %d functions, %v; want pgadmit's", len(sources), err)
	}
}
