package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// PgBouncer restarted (every client and server connection closed at once)
// under a pool set up as the README says (ConfigurePool, exec mode), with
// fewer server connections than clients: the calls made once it listens
// again all succeed, the first one on each connection too (a pool without
// ConfigurePool fails them: "conn closed"), none is counted lost, and nothing
// stays held.
func TestEveryFlowAfterAPgBouncerRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, direct, restart := pgtest.NewRestartablePoolerURL(t, "transaction", 2)
	cfg, err := pgxpool.ParseConfig(pooled + "&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg)
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	admin, err := pgxpool.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	l, m := ratelimit.New(pool), ratelimit.NewMaintenance(pool)
	key := uniqueKey("restart")
	limits := []ratelimit.Limit{
		window("api_key", key, "requests", 1e9, 1),
		concurrent("model", key, 1000),
		{Scope: ratelimit.Scope{Type: "team", Key: key}, Metric: "tokens", Limit: 1e12, Amount: 10, Local: true},
	}
	burst := func(when string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 16*4)
		for range 16 {
			wg.Go(func() {
				task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", QueueLimits: []ratelimit.Limit{queueLimit(key, 1000)}})
				if err != nil {
					errs <- err
					return
				}
				g, err := l.Reserve(ctx, task.ID, task.AttemptID, limits)
				if err != nil {
					errs <- err
					return
				}
				if _, err := l.Commit(ctx, g, map[string]float64{"tokens": 7}); err != nil {
					errs <- err
				}
				if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		if _, err := m.Recover(ctx); err != nil {
			errs <- err
		}
		if _, err := m.Prune(ctx, time.Hour); err != nil {
			errs <- err
		}
		if rep, err := m.Doctor(ctx); err != nil || len(rep.Problems) != 0 {
			t.Errorf("%s: Doctor: %v, %v", when, rep, err)
		}
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", when, err)
		}
	}
	burst("before the restart")
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	burst("after the restart")
	l.Close()
	if lost := l.Stats().Lost; lost != 0 {
		t.Errorf("Stats().Lost = %d, want 0", lost)
	}
	if live := liveLeases(t, admin, "model", key); live != 0 {
		t.Errorf("%d leases live after every grant was settled", live)
	}
	assertBooksBalance(t, admin, "api_key", key)
	assertBooksBalance(t, admin, "team", key)
}
