package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// An operator rolls three migrations (00019-00021, which redefine
// pgadmit_allot_return and pgadmit_task_recheck, and make every function's calls of built-ins
// exact, pgadmit_reserve's among them) back and forward while three gateways serve: two on
// pools with pgx's statement cache (combined and hot batches), one on the simple protocol. A
// fourth instance's combined Reserve waits in pgadmit_reserve for a counter row that a
// transaction holds through every step. No call fails but the expected refusals, no step waits
// (redefining a function takes no lock that a running call of it holds, and 00020 and 00021 keep
// their signatures, so the statements the pools prepared stay valid), the stuck call is admitted
// once the row is free, and the books balance (docs/upgrading.md). The migrations above them
// (00022 builds an index CONCURRENTLY, which waits, by design, for every transaction older than
// itself, the held one among them; 00023 changes comments) are rolled back before the traffic
// starts, and applied under it once the held transaction has ended, each within the same bound.
func TestTrafficAcrossLiveMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4) // three gateways, and the operator's
	cfg := pools[2].Config()
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simple.Close)
	ls := []*ratelimit.Limiter{ratelimit.New(pools[0]), ratelimit.New(pools[1]), ratelimit.New(simple)}
	hot, model := uniqueKey("hot"), uniqueKey("model")
	keys := []string{hot}
	const lastRedefinition = 21 // 00021; the steps below go down three from it
	migrateDownTo(t, pools[3], lastRedefinition)

	// The stuck call: its counter row held by a transaction of the operator's pool.
	stuckKey := uniqueKey("stuck")
	stuckLimits := []ratelimit.Limit{window("api_key", stuckKey, "requests", 100, 1), concurrent("model", stuckKey, 5)}
	stuckLimits = hourLimits(t, pools[3], stuckLimits...)
	stuckL := ratelimit.New(pools[3])
	holder := heldTx(t, pools[3])
	if _, err := stuckL.WithTx(holder).Reserve(ctx, "", "", stuckLimits[:1]); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := stuckL.Reserve(ctx, "", "", stuckLimits); stuck <- err }()
	pgtest.AwaitLockWaiters(t, pools[3], "the stuck Reserve")

	var mu sync.Mutex
	committed := map[string]float64{}
	var calls, refused atomic.Int64
	stop := make(chan struct{})
	failed := make(chan error, 12)
	var wg sync.WaitGroup
	for w := range 12 {
		l, key := ls[w%len(ls)], hot
		if w%4 == 3 {
			key = uniqueKey("plain")
			keys = append(keys, key)
		}
		limits := []ratelimit.Limit{
			window("api_key", key, "requests", 1e9, 1),
			window("api_key", key, "tokens", 1e9, 10),
			concurrent("model", model, 6), // refuses at times
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := migrateTrafficCall(ctx, l, limits, i, &mu, committed, &refused); err != nil {
					failed <- err
					return
				}
				calls.Add(1)
			}
		})
	}
	// progress waits for some calls on the schema as it is now.
	progress := func(what string) {
		t.Helper()
		from := calls.Load()
		for deadline := time.Now().Add(30 * time.Second); calls.Load() < from+150; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) || len(failed) > 0 {
				t.Errorf("%s: only %d calls in 30 s", what, calls.Load()-from)
				return
			}
		}
	}

	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pools[3]))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	progress("at the latest version")
	stepUnderTraffic := func(step string) {
		t.Helper()
		run := p.UpByOne
		if step == "down" {
			run = p.Down
		}
		start := time.Now()
		res, err := run(ctx)
		if err != nil {
			t.Fatalf("%s under traffic: %v", step, err)
		}
		// Each step is one transaction that sets lock_timeout to 5 s, or an index built
		// concurrently once no transaction is held: well below it, it waited for nothing but
		// the traffic's own short transactions.
		took := time.Since(start)
		if took > 4*time.Second {
			t.Errorf("%s %s took %v under traffic", step, res.Source.Path, took)
		}
		t.Logf("%s %s: %v", step, res.Source.Path, took.Round(time.Millisecond))
		progress(step + " " + res.Source.Path)
	}
	steps := []string{"down", "down", "down", "up", "up", "up", "down", "up"} // 00021, three down, up again, one down, up
	for _, step := range steps {
		stepUnderTraffic(step)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatalf("the Reserve that waited in pgadmit_reserve through the steps: %v", err)
	}
	latest := p.ListSources()[len(p.ListSources())-1].Version
	for v := int64(lastRedefinition); v < latest; v++ {
		stepUnderTraffic("up")
	}
	close(stop)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Errorf("a call failed while the schema changed: %v", err)
	}
	if v, err := schema.Version(ctx, pools[3]); err != nil || v != latest {
		t.Fatalf("Version = %d, %v; want the latest, %d", v, err, latest)
	}
	var hotStatements int64
	for _, l := range ls[:2] {
		s := l.Stats()
		hotStatements += s.Reserve.Hot + s.Settle.Hot
	}
	if hotStatements == 0 {
		t.Error("no statement went as a hot batch; the test proves nothing about them")
	}
	t.Logf("%d calls (%d refused), %d hot statements", calls.Load(), refused.Load(), hotStatements)
	assertSettled(t, pools[3], keys, []string{model}, committed)
	assertBooksBalance(t, pools[3], "api_key", stuckKey)
	if live := liveLeases(t, pools[3], "model", stuckKey); live != 1 {
		t.Errorf("the stuck Reserve holds %d live leases, want 1", live)
	}
}

// migrateTrafficCall is one request of TestTrafficAcrossLiveMigrations: Reserve, every other
// one RenewLeases, then Commit of what it used (every third one Release). A refusal is counted,
// any other error returned.
func migrateTrafficCall(ctx context.Context, l *ratelimit.Limiter, limits []ratelimit.Limit, i int,
	mu *sync.Mutex, committed map[string]float64, refused *atomic.Int64) error {
	g, err := l.Reserve(ctx, "", "", limits)
	if errors.Is(err, ratelimit.ErrExceeded) {
		refused.Add(1)
		return nil
	}
	if err != nil {
		return fmt.Errorf("Reserve: %w", err)
	}
	if i%2 == 0 {
		if _, err := l.RenewLeases(ctx, g.Leases); err != nil {
			return fmt.Errorf("RenewLeases: %w", err)
		}
	}
	if i%3 == 0 {
		if _, err := l.Release(ctx, g, "upstream_error"); err != nil {
			return fmt.Errorf("Release: %w", err)
		}
		return nil
	}
	if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7}); err != nil {
		return fmt.Errorf("Commit: %w", err)
	}
	key := limits[0].Scope.Key
	mu.Lock()
	committed[key+" requests"]++
	committed[key+" tokens"] += 7
	mu.Unlock()
	return nil
}

// docs/upgrading.md: roll the binaries back before the schema. On a schema rolled back below
// 00012 (pgadmit_hot_commit dropped), this binary's hot batches fail, with nothing of them
// applied: the batch and the CALL are one implicit transaction.
func TestHotBatchesFailBelowMigration12(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	migrateDownTo(t, pool, 11)
	l := ratelimit.New(pool)
	key := uniqueKey("below12")
	req := ratelimit.BatchRequest{Limits: []ratelimit.Limit{window("api_key", key, "requests", 100, 1)}}
	_, _, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{req, req}) // one counter: a hot batch
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42883" {
		t.Fatalf("hot batch on schema 11: %v, want 42883 (pgadmit_hot_commit does not exist)", err)
	}
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue != 0 || c.ReservedValue != 0 {
			t.Errorf("counter %+v: the failed hot batch admitted something", c)
		}
	}
	assertBooksBalance(t, pool, "api_key", key)
}

// This version's FinishTask takes the task's fence (pgadmit_task_fence_key,
// migration 00020): on a schema below it, it fails and changes nothing
// (docs/upgrading.md), while a Reserve for the task runs as before.
func TestFinishTaskFailsBelowMigration20(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	migrateDownTo(t, pool, 19)
	l := ratelimit.New(pool)
	task := startSync(t, l, time.Minute)
	key := uniqueKey("below20")
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, hourLimits(t, pool, window("api_key", key, "requests", 100, 1))); err != nil {
		t.Fatalf("Reserve for a task on schema 19: %v", err)
	}
	_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42883" {
		t.Fatalf("FinishTask on schema 19: %v, want 42883 (pgadmit_task_fence_key does not exist)", err)
	}
	if s := summary(t, pool); s.TasksRunning != 1 || s.ReservationsOpen != 1 {
		t.Errorf("after the failed FinishTask: %+v, want the task running and its reservation open", s)
	}
}

// migrateDownTo takes the test database's schema down to version v.
func migrateDownTo(t *testing.T, pool *pgxpool.Pool, v int64) {
	t.Helper()
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DownTo(context.Background(), v); err != nil {
		t.Fatal(err)
	}
}
