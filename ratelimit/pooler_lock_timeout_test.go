package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind PgBouncer in transaction mode, in each exec mode that suits it,
// WithMaintenanceLockTimeout bounds Recover's wait for a counter row
// another session holds, and leaves no lock_timeout on the server
// sessions that other clients get next: it is set per batch, in the
// batch's own transaction.
func TestMaintenanceLockTimeoutBehindTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, directURL := pgtest.NewPoolerURL(t)
	direct := poolsOn(t, directURL, 1, pgx.QueryExecModeExec)[0]
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := poolsOn(t, pooled, 1, mode)[0]
			var clock testClock
			ld, _ := clocked(direct, &clock)
			_, m := clocked(pool, &clock, ratelimit.WithRecoveryBatchSize(1), ratelimit.WithMaintenanceLockTimeout(lockBound))
			locked := uniqueKey("locked")
			syncTask := func(int) ratelimit.Task { return startSync(t, ld, time.Second) }
			deadTasksOn(t, ld, &clock, syncTask, uniqueKey("free"), locked, uniqueKey("free"))
			release := holdCounters(t, direct, "api_key", locked)

			hang, stop := context.WithTimeout(ctx, lockBound+lockSlack)
			defer stop()
			res, err := m.Recover(hang)
			assertLockWait(t, err, "recover", "reclaim expired tasks", 1)
			if errors.Is(err, context.DeadlineExceeded) || res.FailedTasks != 2 || res.ReleasedRateReservations != 2 {
				t.Errorf("Recover = %+v, %v; want the 2 tasks on free counters failed, their reservations released", res, err)
			}
			for range pgtest.PoolerSize { // any server session the pooler may hand out
				if v, err := db.New().BenchServerSetting(ctx, pool, "lock_timeout"); err != nil || v != "0" {
					t.Errorf("lock_timeout behind the pooler = %q, %v; want the server's default, 0", v, err)
				}
			}
			release()
			recoverOnce(t, m, ratelimit.RecoveryResult{FailedTasks: 1, FailedAttempts: 1, ReleasedRateReservations: 1})
		})
	}
}
