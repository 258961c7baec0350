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

// pgadmit's functions run with their caller's privileges and resolve what they call through the
// caller's search_path, where pg_catalog comes first but a function or operator of another schema
// wins when it matches a call exactly and pg_catalog's needs a cast or is polymorphic: a role that
// may create in a schema on the path (public, before PostgreSQL 15) ran code of its choosing as
// every gateway. Each schema lookalike_<what> (OpsPlantLookalikes) holds a lookalike of such a
// call; a gateway whose search_path has it after pgadmit's schema reserves (one limit, several
// with a task, combined batches, a hot batch, a Local limit), renews and commits, and every call
// runs pg_catalog's functions: none of the lookalikes, which fail the statement that runs them.
// What is tested is pgadmit's functions (schema/00021): the statements of queries/*.sql that
// call built-ins themselves are resolved the same way and not all are exact yet (CreateTask's
// make_interval, LeaseLockScopes' hashtextextended and unnest), so the task is created on a pool
// without lookalikes and the renewal runs LeaseRenew alone.
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
	if len(schemas) != 15 {
		t.Fatalf("OpsPlantLookalikes made %d schemas: %v", len(schemas), schemas)
	}
	for _, schema := range schemas {
		t.Run(schema, func(t *testing.T) {
			gatewayCallsWithLookalikes(t, admin, pgtest.OpenPool(t, url+"&search_path=public,"+schema))
		})
	}
}

// gatewayCallsWithLookalikes runs, on pool, a call of each of pgadmit's functions, and reports
// each that fails. The task is created on admin.
func gatewayCallsWithLookalikes(t *testing.T, admin, pool *pgxpool.Pool) {
	ctx := context.Background()
	l := ratelimit.New(pool)
	defer l.Close()
	key := uniqueKey("lookalike")
	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricTokens, Limit: 100, Amount: 60, Window: time.Hour},
		{Scope: ratelimit.Scope{Type: "model", Key: key}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1},
	}
	tasks := ratelimit.New(admin)
	defer tasks.Close()
	task, err := tasks.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	// pgadmit_reserve (two limits, a task: pgadmit_task_recheck, pgadmit_task_fence_key).
	grant, err := l.Reserve(ctx, task.ID, "", limits)
	if err != nil {
		t.Fatalf("Reserve of a window and a concurrency limit: %v", err)
	}
	// pgadmit_renew_leases, by its query alone: RenewLeases first runs LeaseLockScopes, whose
	// own calls (not a function's) the gateway's search_path resolves (see the test's doc).
	var lease pgtype.UUID
	if err := lease.Scan(grant.Leases[0].ID); err != nil {
		t.Fatal(err)
	}
	renewed, err := queries.LeaseRenew(ctx, pool, db.LeaseRenewParams{LeaseIds: []pgtype.UUID{lease}, TtlSeconds: []int32{60}})
	if err != nil || len(renewed) != 1 {
		t.Errorf("LeaseRenew = %d leases, %v; want 1", len(renewed), err)
	}
	// pgadmit_settle.
	if _, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 40}); err != nil {
		t.Errorf("Commit: %v", err)
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
	lw := localWindow(key+"/local", 1e6, 1)
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
}
