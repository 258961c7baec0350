package ratelimit_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// lock_timeout is set to the bound rounded up to a whole millisecond, exactly: a bound sent as
// float seconds, whose thousandfold is not always whole, was set 1ms longer for some whole
// milliseconds (1.132s as 1133ms). Past lock_timeout's range (2147483647ms, pgadmit's largest
// --lock-timeout) it is that range's end. In both ways a bound is set: in a statement's batch
// or transaction (steps, Doctor), and in a transaction of its own (reclaiming tasks).
func TestMaintenanceLockTimeoutIsTheBoundInWholeMilliseconds(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		pool := poolsOn(t, url, 1, mode)[0]
		for _, c := range []struct {
			bound time.Duration
			want  int64
		}{
			{1132 * time.Millisecond, 1132},
			{1257 * time.Millisecond, 1257},
			{5 * time.Second, 5000},
			{1500 * time.Microsecond, 2},
			{time.Nanosecond, 1},
			{time.Second + time.Nanosecond, 1001},
			{2147483646 * time.Millisecond, 2147483646},
			{2147483647 * time.Millisecond, 2147483647},
			{1000 * time.Hour, 2147483647},
			{math.MaxInt64, 2147483647},
		} {
			m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(c.bound))
			statement, tx, err := m.LockTimeoutsSet(context.Background())
			if err != nil || statement != c.want || tx != c.want {
				t.Errorf("%s: WithMaintenanceLockTimeout(%s) set lock_timeout to %dms for a statement, %dms in a transaction (%v); want %dms",
					mode, c.bound, statement, tx, err, c.want)
			}
		}
	}
}
