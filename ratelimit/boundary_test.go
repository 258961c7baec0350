package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The largest and smallest values validation lets through reach the
// PL/pgSQL functions and come back as answers (a grant, a refusal), never
// as a raw error of the server: 512-byte scopes and metrics of multi-byte
// characters, the longest window and lease, the largest and smallest
// amounts, in a plain admission, a combined batch on one counter (a hot
// batch), a block of a Local limit and a queue; and the largest durations
// and sizes the maintenance calls and options take (a lease of MaxInt64,
// batches capped at MaxInt32).
func TestBoundaryValuesReachTheFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(l.Close)
	longest := time.Duration(math.MaxInt64)
	m := ratelimit.NewMaintenance(pool, ratelimit.WithLostAllotmentGrace(longest), ratelimit.WithTaskRetention(longest),
		ratelimit.WithMaintenanceLeaseTTL(longest), ratelimit.WithRecoveryBatchSize(math.MaxInt), ratelimit.WithPruneBatchSize(math.MaxInt),
		ratelimit.WithMaxRequeues(math.MaxInt), ratelimit.WithPruneEvents(true), ratelimit.WithProgress(longest, func(ratelimit.Progress) {}),
		ratelimit.WithMaintenanceLockTimeout(longest))

	long := func(prefix string) string { // 512 bytes, mostly two per character
		n := ratelimit.MaxScopeBytes - len(prefix)
		return prefix + strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
	}
	scope := ratelimit.Scope{Type: long("ty"), Key: long("ke")}
	if len(scope.Type) != ratelimit.MaxScopeBytes || len(scope.Key) != ratelimit.MaxScopeBytes {
		t.Fatalf("scope of %d and %d bytes", len(scope.Type), len(scope.Key))
	}
	metric := long("me")
	raw := func(op string, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			t.Fatalf("%s: a raw server error: %v", op, err)
		}
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	exceeded := func(op string, err error, retryable bool) {
		t.Helper()
		var ex *ratelimit.ExceededError
		if !errors.As(err, &ex) || ex.Retryable != retryable {
			t.Fatalf("%s: %v; want a refusal, retryable %v", op, err, retryable)
		}
	}

	huge := ratelimit.Limit{Scope: scope, Metric: metric, Limit: ratelimit.MaxAmount, Amount: ratelimit.MaxAmount, Window: ratelimit.MaxWindow}
	slots := ratelimit.Limit{Scope: scope, Metric: ratelimit.MetricConcurrent, Limit: ratelimit.MaxAmount, Amount: ratelimit.MaxAmount, LeaseTTL: ratelimit.MaxLeaseTTL}
	tiny := ratelimit.Limit{Scope: scope, Metric: metric, Limit: ratelimit.MinAmount, Amount: ratelimit.MinAmount, Window: time.Second}
	raw("Check", l.Check(ctx, []ratelimit.Limit{huge, slots, tiny}))
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{huge, slots})
	raw("Reserve", err)
	_, err = l.Commit(ctx, g, map[string]float64{metric: ratelimit.MaxAmount})
	raw("Commit", err)
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{huge})
	exceeded("Reserve past the largest limit", err, true)
	huge.Limit = ratelimit.MinAmount
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{huge})
	exceeded("Reserve of more than the limit", err, false)

	pgtest.AwaitRoomInWindow(t, pool, time.Second, 500*time.Millisecond)
	g, err = l.Reserve(ctx, "", "", []ratelimit.Limit{tiny})
	raw("Reserve of the smallest amount", err)
	_, err = l.Release(ctx, g, long("re"))
	raw("Release with the longest reason", err)

	// As many limits as a call takes, half of them concurrency scopes.
	var many []ratelimit.Limit
	for i := range ratelimit.MaxLimitsPerCall {
		lim := ratelimit.Limit{Scope: ratelimit.Scope{Type: scope.Type, Key: long(fmt.Sprintf("%03d", i))}, Metric: metric,
			Limit: ratelimit.MaxAmount, Amount: ratelimit.MaxAmount, Window: ratelimit.MaxWindow}
		if i%2 == 1 {
			lim.Metric, lim.Window, lim.LeaseTTL = ratelimit.MetricConcurrent, 0, ratelimit.MaxLeaseTTL
		}
		many = append(many, lim)
	}
	g, err = l.Reserve(ctx, "", "", many)
	raw("Reserve of the most limits", err)
	_, err = l.Release(ctx, g, "")
	raw("Release of the most limits", err)

	// Two requests on one counter in one combined batch: a hot batch.
	half := ratelimit.Limit{Scope: ratelimit.Scope{Type: scope.Type, Key: long("ho")}, Metric: metric, Limit: ratelimit.MaxAmount,
		Amount: ratelimit.MaxAmount / 2, Window: ratelimit.MaxWindow}
	grants, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{{Limits: []ratelimit.Limit{half}}, {Limits: []ratelimit.Limit{half}}, {Limits: []ratelimit.Limit{half}}})
	raw("ReserveCombined", err)
	raw("ReserveCombined[0]", errs[0])
	raw("ReserveCombined[1]", errs[1])
	exceeded("ReserveCombined[2]", errs[2], true)
	_, err = l.CommitCombined(ctx, grants[:2])
	raw("CommitCombined", err)

	// A Local limit of the longest window: a block of it.
	local := ratelimit.Limit{Scope: ratelimit.Scope{Type: scope.Type, Key: long("lo")}, Metric: metric, Limit: ratelimit.MaxAmount,
		Amount: ratelimit.MinAmount, Window: ratelimit.MaxWindow, Local: true}
	g, err = l.Reserve(ctx, "", "", []ratelimit.Limit{local})
	raw("Reserve of a Local limit", err)
	_, err = l.Commit(ctx, g, map[string]float64{metric: ratelimit.MaxAmount})
	raw("Commit of a Local limit", err)

	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: long("wo"), LeaseTTL: ratelimit.MaxLeaseTTL, QueueLimits: []ratelimit.Limit{
		{Scope: scope, Metric: ratelimit.MetricQueueSize, Limit: math.MaxInt32, Amount: 1},
	}})
	raw("CreateTask", err)
	_, err = l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, ratelimit.MaxLeaseTTL)
	raw("HeartbeatTask", err)
	_, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	raw("FinishTask", err)

	_, err = m.Recover(ctx)
	raw("Recover", err)
	_, err = m.Prune(ctx, time.Duration(math.MaxInt64))
	raw("Prune", err)
	report, err := m.Doctor(ctx)
	raw("Doctor", err)
	if !report.OK() {
		t.Fatalf("doctor: %s", report)
	}
}

// A queue_size limit above what a queue counts (an int4) is refused for
// being too large, not for being fractional: 3e9 is a whole number.
func TestQueueLimitTooLargeSaysSo(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	_, err := l.CreateTask(context.Background(), ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("q", 3e9)}})
	var v *ratelimit.ValidationError
	if !errors.As(err, &v) || v.Field != "QueueLimits[0].Limit" || !strings.Contains(v.Reason, "at most 2147483647") {
		t.Fatalf("CreateTask with a queue limit of 3e9: %v; want QueueLimits[0].Limit refused as above 2147483647", err)
	}
	if n := rowCounts(t, pool); n.Tasks != 0 {
		t.Errorf("a refused task wrote %d task rows", n.Tasks)
	}
}
