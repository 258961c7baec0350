package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind PgBouncer in transaction mode the next client of a server session
// inherits whatever a transaction left in it: PgBouncer runs no
// server_reset_query there. So every operation, in each exec mode that suits
// a transaction pooler, must leave the server sessions it ran on as it found
// them: no setting changed for the session, no prepared statement, no LISTEN,
// no open cursor, no advisory lock, no temporary table. Checked on the
// sessions themselves, over direct connections: through a pooler a check
// cannot tell which session it lands on. Nor do operations in a caller's
// transaction (WithTx) change a setting for the rest of it.
func TestEveryOperationLeavesItsServerSessionsAsItFoundThem(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pools := configuredPoolsOn(t, pgtest.NewURL(t), 2, mode)
			if c := runEveryOperation(t, pools); c.failedTotal() != 0 {
				t.Fatalf("%d calls failed: %v", c.failedTotal(), c.errs)
			}
			pool := pools[0]

			// What runEveryOperation leaves out: a Local limit's blocks, taken and
			// returned by the Limiter's housekeeping; a Recover that reclaims an
			// expired task (a transaction of its own) and a Prune of events, both
			// with lock_timeout set per batch; Doctor with its own bound; the
			// pooler check.
			local := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
			if _, err := local.Commit(ctx, reserveLocal(t, local, hourWindow(t, pool), uniqueKey("local"), 1e6, 1), nil); err != nil {
				t.Fatalf("Commit(Local): %v", err)
			}
			local.Close()
			var clock testClock
			l, m := clocked(pool, &clock, ratelimit.WithMaintenanceLockTimeout(time.Second),
				ratelimit.WithDoctorLockTimeout(time.Second), ratelimit.WithPruneEvents(true))
			task := startSync(t, l, time.Second)
			if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{window("api_key", uniqueKey("k"), ratelimit.MetricTokens, 100, 1)}); err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			clock.pass(task.LeaseExpiresAt)
			if res, err := m.Recover(ctx); err != nil || res.FailedTasks != 1 {
				t.Fatalf("Recover = %+v, %v; want the expired task failed", res, err)
			}
			if _, err := m.Prune(ctx, time.Hour); err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if _, err := m.Doctor(ctx); err != nil {
				t.Fatalf("Doctor: %v", err)
			}
			if err := ratelimit.CheckPooler(ctx, pool); err != nil {
				t.Fatalf("CheckPooler: %v", err)
			}
			// Nor does an operation change a setting of a caller's transaction for the
			// rest of it (a function's SET clause ends with the call).
			var g ratelimit.Grant
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				in := ratelimit.New(pool).WithTx(tx)
				key := uniqueKey("tx")
				var err error
				if g, err = in.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 100, 1), concurrent("model", key, 10)}); err != nil {
					return err
				}
				task, err := in.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", QueueLimits: []ratelimit.Limit{queueLimit(key, 10)}})
				if err != nil {
					return err
				}
				if _, err := in.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress"}); err != nil {
					return err
				}
				if _, err := in.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
					return err
				}
				state, err := testq.SessionStateLeft(ctx, tx)
				if err == nil && len(state.Settings) != 0 {
					t.Errorf("settings changed in the caller's transaction: %q; want none", state.Settings)
				}
				return err
			})
			if err != nil {
				t.Fatalf("operations in a caller's transaction: %v", err)
			}
			if _, err := l.Commit(ctx, g, nil); err != nil {
				t.Fatalf("Commit: %v", err)
			}

			for i, p := range pools {
				assertSessionsAsFound(t, p, i)
			}
		})
	}
}

// assertSessionsAsFound checks every server session of pool (its idle
// connections: all of them, once its operations are done) for state left
// beyond a transaction.
func assertSessionsAsFound(t *testing.T, pool *pgxpool.Pool, index int) {
	t.Helper()
	ctx := context.Background()
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	if len(conns) == 0 || int32(len(conns)) != pool.Stat().TotalConns() {
		t.Fatalf("pool %d: %d idle connections of %d; want every one, and at least one", index, len(conns), pool.Stat().TotalConns())
	}
	for _, c := range conns {
		state, err := testq.SessionStateLeft(ctx, c)
		if err != nil {
			t.Fatalf("pool %d: SessionStateLeft: %v", index, err)
		}
		empty := dbtest.SessionStateLeftRow{Settings: []string{}, PreparedStatements: []string{}, ListeningChannels: []string{},
			Cursors: []string{}, TempRelations: []string{}}
		if len(state.Settings)+len(state.PreparedStatements)+len(state.ListeningChannels)+len(state.Cursors)+
			len(state.TempRelations) != 0 || state.AdvisoryLocks != 0 {
			t.Errorf("pool %d: server session %d holds %#v; want %#v", index, c.Conn().PgConn().PID(), state, empty)
		}
	}
}

// configuredPoolsOn returns n pools on url set up as the README has them
// behind a pooler: ConfigurePool, and exec mode mode.
func configuredPoolsOn(t *testing.T, url string, n int, mode pgx.QueryExecMode) []*pgxpool.Pool {
	t.Helper()
	cfg := modeConfig(t, url, mode)
	ratelimit.ConfigurePool(cfg)
	return poolsFrom(t, cfg, n)
}
