package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// Every operation through PgBouncer in transaction pooling mode (PoolerSize server connections
// shared by the clients of four pools), in each of pgx's exec modes: how many calls of each
// operation failed. exec, cache_describe and simple_protocol must see no failure at all, and
// leave no lease live; pgx's default (cache_statement) and describe_exec must fail the way a
// pooler that moves a connection between sessions makes them fail. Run with -v to see the
// matrix.
func TestPgBouncerExecModeMatrix(t *testing.T) {
	t.Parallel()
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	results := make([]*opCounts, len(modes))
	var wg sync.WaitGroup
	for i, mode := range modes {
		pools := pgtest.NewPoolerPools(t, 4, mode)
		wg.Go(func() { results[i] = runEveryOperation(t, pools) })
	}
	wg.Wait()

	t.Logf("PgBouncer (transaction pooling, %d server connections), failed/calls per operation:\n%s",
		pgtest.PoolerSize, matrix(modes, results))
	for i, mode := range modes {
		r := results[i]
		failed := r.failedTotal()
		if mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeDescribeExec {
			if failed == 0 {
				t.Errorf("%s: no call failed behind a transaction pooler; the README says it does", mode)
			}
			if mode == pgx.QueryExecModeDescribeExec {
				// It binds whatever unnamed statement the session it lands on holds: 08P01
				// when the parameter counts differ; when they agree, another client's
				// statement runs, and anything may happen, such as a result of the wrong shape.
				continue
			}
			for _, err := range r.errs {
				// It loses its prepared statements (26000), or meets another client's (42P05);
				// pgadmit's operations say so with a *PoolerError (Migrate is goose's).
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
					t.Errorf("%s: unexpected failure %v", mode, err)
				}
				var pe *ratelimit.PoolerError
				if !strings.HasPrefix(err.Error(), "Migrate:") && (!errors.As(err, &pe) || pe.Mode != "cache_statement" || !errors.Is(err, ratelimit.ErrPoolerMismatch)) {
					t.Errorf("%s: %v is not a *PoolerError that says what to change", mode, err)
				}
				if strings.Contains(err.Error(), ": ratelimit: pgx's") {
					t.Errorf("%s: the error says \"ratelimit:\" more than once: %v", mode, err)
				}
			}
			continue
		}
		if failed != 0 {
			t.Errorf("%s: %d calls failed behind a transaction pooler: %v", mode, failed, r.errs)
		}
		if r.leakedLeases != 0 {
			t.Errorf("%s: %d leases left live after every grant was settled", mode, r.leakedLeases)
		}
	}
}

// opCounts counts the calls of each operation and their failures: errors other than the
// outcomes an operation may have (a refusal, no task to claim, a lost lease or claim).
type opCounts struct {
	mu           sync.Mutex
	calls, fails map[string]int
	errs         []error
	leakedLeases int64
}

func (c *opCounts) do(op string, fn func() error) bool {
	err := fn()
	expected := errors.Is(err, ratelimit.ErrExceeded) || errors.Is(err, ratelimit.ErrNoTask) ||
		errors.Is(err, ratelimit.ErrLeaseLost) || errors.Is(err, ratelimit.ErrStaleToken) ||
		errors.Is(err, ratelimit.ErrTaskFinished) || errors.Is(err, ratelimit.ErrTaskNotQueued)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
	if err != nil && !expected {
		c.fails[op]++
		if len(c.errs) < 1000 {
			c.errs = append(c.errs, fmt.Errorf("%s: %w", op, err))
		}
		return false
	}
	return err == nil
}

func (c *opCounts) failedTotal() int {
	n := 0
	for _, f := range c.fails {
		n += f
	}
	return n
}

// runEveryOperation runs every pgadmit operation from 8 workers over pools, then settles what is
// left and counts the leases still live.
func runEveryOperation(t *testing.T, pools []*pgxpool.Pool) *opCounts {
	ctx := context.Background()
	c := &opCounts{calls: map[string]int{}, fails: map[string]int{}}
	key := uniqueKey("k")
	var wg sync.WaitGroup
	for w := range 8 {
		pool := pools[w%len(pools)]
		l, m := ratelimit.New(pool), ratelimit.NewMaintenance(pool)
		wg.Go(func() {
			limits := []ratelimit.Limit{
				window("api_key", key, "requests", 1e6, 1),
				window("api_key", key, "tokens", 1e9, 50),
				concurrent("model", key, 1000),
			}
			for i := range 4 {
				c.do("Migrate", func() error { return schema.Migrate(ctx, pool) })
				c.do("Check", func() error { return l.Check(ctx, limits[:2]) })
				var task ratelimit.Task
				if !c.do("CreateTask", func() (err error) {
					task, err = l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", QueueLimits: []ratelimit.Limit{queueLimit(key, 1000)}})
					return err
				}) {
					continue
				}
				var g ratelimit.Grant
				if c.do("Reserve", func() (err error) { g, err = l.Reserve(ctx, task.ID, "", limits); return err }) {
					c.do("Attach", func() (err error) { g, err = l.Attach(ctx, task.AttemptID, g); return err })
					c.do("RenewLeases", func() error { _, err := l.RenewLeases(ctx, g.Leases); return err })
					if i%2 == 0 {
						c.do("Commit", func() error { _, err := l.Commit(ctx, g, map[string]float64{"tokens": 42}); return err })
					} else {
						c.do("ReleaseLeases", func() error { _, err := l.ReleaseLeases(ctx, g.Leases, "done"); return err })
						c.do("Release", func() error { _, err := l.Release(ctx, g, "upstream_error"); return err })
					}
				}
				c.do("HeartbeatTask", func() error { _, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute); return err })
				c.do("AppendEvent", func() error {
					_, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 0.5, Payload: []byte(`{"i":1}`)})
					return err
				})
				c.do("FinishTask", func() error {
					_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
					return err
				})
				c.do("GetTask", func() error { _, err := l.GetTask(ctx, task.ID); return err })
				c.do("TaskEvents", func() error { _, err := l.TaskEvents(ctx, task.ID); return err })
				c.do("TaskAttempts", func() error { _, err := l.TaskAttempts(ctx, task.ID); return err })
				// An async task, claimed and finished by a worker.
				c.do("CreateTask", func() error { _, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true}); return err })
				var claimed ratelimit.Task
				if c.do("ClaimTask", func() (err error) { claimed, err = l.ClaimTask(ctx, "w", time.Minute); return err }) {
					c.do("FinishTask", func() error {
						_, err := l.FinishTask(ctx, claimed.ID, claimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "x"})
						return err
					})
				}
				// An async task holding a reservation and a lease while it waits, cancelled by
				// its owner (or claimed first by another worker's ClaimTask: ErrTaskNotQueued).
				var waiting ratelimit.Task
				if c.do("CreateTask", func() (err error) { waiting, err = l.CreateTask(ctx, ratelimit.TaskSpec{Async: true}); return err }) {
					c.do("Reserve", func() error { _, err := l.Reserve(ctx, waiting.ID, "", limits); return err })
					c.do("CancelTask", func() error { _, err := l.CancelTask(ctx, waiting.ID, "gone"); return err })
				}
				// Admission and a task in one transaction of the caller's, settled after it.
				var tg ratelimit.Grant
				if c.do("WithTx", func() error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						in := l.WithTx(tx)
						var err error
						if tg, err = in.Reserve(ctx, "", "", limits[:2]); err != nil {
							return err
						}
						_, err = in.CreateTask(ctx, ratelimit.TaskSpec{Async: true})
						return err
					})
				}) {
					c.do("Commit", func() error { _, err := l.Commit(ctx, tg, nil); return err })
				}
				// A batch on one counter: the procedures that commit twice (hot batches).
				c.do("HotBatch", func() error {
					reqs := []ratelimit.BatchRequest{{Limits: limits[:2]}, {Limits: limits[:2]}, {Limits: limits[:2]}}
					grants, errs, err := l.ReserveCombined(ctx, reqs)
					if err == nil {
						err = errors.Join(errs...)
					}
					if err == nil {
						_, err = l.CommitCombined(ctx, grants)
					}
					return err
				})
				c.do("Recover", func() error { _, err := m.Recover(ctx); return err })
				c.do("Prune", func() error { _, err := m.Prune(ctx, time.Hour); return err })
				c.do("Doctor", func() error { _, err := m.Doctor(ctx); return err })
			}
		})
	}
	wg.Wait()
	c.leakedLeases = liveLeasesThrough(t, pools[0], key)
	return c
}

// liveLeasesThrough reads the live leases of model:key, retrying a read that the pooler's
// prepared-statement trouble failed.
func liveLeasesThrough(t *testing.T, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	var err error
	for range 10 {
		var row dbtest.LeaseLiveByScopeRow
		if row, err = testq.LeaseLiveByScope(context.Background(), pool, dbtest.LeaseLiveByScopeParams{ScopeType: "model", ScopeKey: key}); err == nil {
			return row.Leases
		}
	}
	t.Errorf("reading the live leases: %v", err)
	return -1
}

// matrix formats the failures per operation and mode.
func matrix(modes []pgx.QueryExecMode, results []*opCounts) string {
	var ops []string
	for op := range results[0].calls {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s", "operation")
	for _, mode := range modes {
		fmt.Fprintf(&b, " %16s", mode)
	}
	b.WriteString("\n")
	for _, op := range append(ops, "total", "leaked leases") {
		fmt.Fprintf(&b, "%-14s", op)
		for _, r := range results {
			var cell string
			switch op {
			case "total":
				calls := 0
				for _, n := range r.calls {
					calls += n
				}
				cell = fmt.Sprintf("%d/%d", r.failedTotal(), calls)
			case "leaked leases":
				cell = fmt.Sprint(r.leakedLeases)
			default:
				cell = fmt.Sprintf("%d/%d", r.fails[op], r.calls[op])
			}
			fmt.Fprintf(&b, " %16s", cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}
