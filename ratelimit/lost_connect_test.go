package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Reserve whose pool could not open a connection (a PgBouncer restarting, or
// down: connecting is refused) sent nothing, so nothing of it can be held:
// Stats.Lost must not count it, combining or not, for the scalar statement of
// one window limit and for the statement of several limits. Counting it made
// every PgBouncer restart look, to an operator watching Lost, like grants
// leaked by the hundred (a soak test through a PgBouncer restarted twice counted
// 187 lost Reserves, and no lease or reservation was left held).
func TestStatsLostCountsNoReserveWhosePoolCouldNotConnect(t *testing.T) {
	t.Parallel()
	stopped, err := deadserver.Stop()
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	addr := stopped.Addr()
	cfg, err := pgxpool.ParseConfig("postgres://nobody@" + addr + "/none?sslmode=disable&default_query_exec_mode=exec&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	key := uniqueKey("refused")
	shapes := map[string][]ratelimit.Limit{
		"one window limit": {window("key", key, "requests", 10, 1)},
		"several limits":   {window("key", key, "requests", 10, 1), concurrent("model", key, 10)},
	}
	for _, combining := range []bool{true, false} {
		for name, limits := range shapes {
			var opts []ratelimit.Option
			if !combining {
				opts = append(opts, ratelimit.WithoutCombining())
			}
			l := ratelimit.New(pool, opts...)
			_, err := l.Reserve(context.Background(), "", "", limits)
			var connErr *pgconn.ConnectError
			if !errors.As(err, &connErr) {
				t.Errorf("combining %v, %s: Reserve through a pooler that refuses connections: %v, want a *pgconn.ConnectError", combining, name, err)
			}
			l.Close()
			assertLost(t, l, 0, "a Reserve whose pool could not connect (combining "+map[bool]string{true: "on", false: "off"}[combining]+", "+name+")")
		}
	}
}

// So a Reserve on a pool that was closed (a caller's mistake at shutdown: the
// pool closed before the Limiter): pgxpool refuses it before anything is sent.
func TestStatsLostCountsNoReserveOnAClosedPool(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	key := uniqueKey("closed-pool")
	limits := map[string][]ratelimit.Limit{
		"one window limit": {window("key", key, "requests", 10, 1)},
		"several limits":   {window("key", key, "requests", 10, 1), concurrent("model", key, 10)},
	}
	pool.Close()
	for _, combining := range []bool{true, false} {
		for name, limits := range limits {
			var opts []ratelimit.Option
			if !combining {
				opts = append(opts, ratelimit.WithoutCombining())
			}
			l := ratelimit.New(pool, opts...)
			if _, err := l.Reserve(context.Background(), "", "", limits); err == nil {
				t.Errorf("combining %v, %s: Reserve on a closed pool succeeded", combining, name)
			}
			l.Close()
			assertLost(t, l, 0, "a Reserve on a closed pool (combining "+map[bool]string{true: "on", false: "off"}[combining]+", "+name+")")
		}
	}
}
