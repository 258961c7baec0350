package ratelimit_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pingCounts counts what a ConfigurePool pool's ShouldPing decided: calls,
// and pings of a connection used within the last second (pgxpool's idle
// rule pings only longer idle ones, so each of these is a peek's doing, a
// round trip on the path of an acquire).
type pingCounts struct {
	calls, recentPings atomic.Int64
}

// pingCountedPool makes a ConfigurePool pool of conns connections on dsn,
// its ShouldPing counted.
func pingCountedPool(t *testing.T, dsn string, conns int32) (*pgxpool.Pool, *pingCounts) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	ratelimit.ConfigurePool(cfg)
	counts := &pingCounts{}
	shouldPing := cfg.ShouldPing
	cfg.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		ping := shouldPing(ctx, p)
		counts.calls.Add(1)
		if ping && p.IdleDuration <= time.Second {
			counts.recentPings.Add(1)
		}
		return ping
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counts
}

// transports are the ways to the test server a pool may connect: the URL
// as given (TCP), TLS (sslmode=require) and the Unix socket of a server on
// port 5432 in /var/run/postgresql. A transport the server does not offer
// is skipped, saying so.
func transports(t *testing.T, dsn string) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"tcp": func(*testing.T) string { return dsn },
		"tls": func(t *testing.T) string {
			u := parsedURL(t, dsn)
			q := u.Query()
			q.Set("sslmode", "require")
			u.RawQuery = q.Encode()
			tls := u.String()
			p, err := pgxpool.New(context.Background(), tls)
			if err == nil {
				err = p.Ping(context.Background())
				p.Close()
			}
			if err != nil && strings.Contains(err.Error(), "refused TLS") {
				t.Skipf("the server offers no TLS: %v", err)
			}
			return tls
		},
		"unix": func(t *testing.T) string {
			u := parsedURL(t, dsn)
			port := u.Port()
			if port == "" {
				port = "5432"
			}
			const dir = "/var/run/postgresql"
			if _, err := os.Stat(dir + "/.s.PGSQL." + port); err != nil {
				t.Skipf("no Unix socket for port %s in %s: %v", port, dir, err)
			}
			q := u.Query()
			q.Set("host", dir)
			u.RawQuery = q.Encode()
			return u.String()
		},
	}
}

func parsedURL(t *testing.T, dsn string) *url.URL {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A busy, healthy ConfigurePool pool pings no connection used within the
// last second: the peek at its socket finds nothing to read, so it costs no
// round trip per acquire, over TCP, TLS and a Unix socket alike.
func TestConfiguredBusyPoolPingsNoConnectionUsedInTheLastSecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	for name, transport := range transports(t, dsn) {
		t.Run(name, func(t *testing.T) {
			pool, counts := pingCountedPool(t, transport(t), 2)
			l := ratelimit.New(pool)
			t.Cleanup(l.Close)
			key := uniqueKey("busy")
			limits := []ratelimit.Limit{window("provider", key, "requests", 1e9, 1), concurrent("tenant", key, 1e6)}
			// A count of calls, not a span of time: a loaded CI machine makes
			// fewer calls a second, and the test is no weaker for it (an
			// acquire after more than a second idle is not counted).
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 50 {
						g, err := l.Reserve(ctx, "", "", limits)
						if err != nil {
							t.Error(err)
							return
						}
						if _, err := l.Release(ctx, g, "done"); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			calls, pings := counts.calls.Load(), counts.recentPings.Load()
			t.Logf("%d acquires asked ShouldPing, %d pinged a connection used within a second", calls, pings)
			if calls < 50 { // 400 calls; combining merges at most 4 into one acquire
				t.Fatalf("only %d acquires asked ShouldPing: the pool was not busy", calls)
			}
			if pings != 0 {
				t.Errorf("%d of %d acquires pinged a connection used within the last second, want 0", pings, calls)
			}
		})
	}
}

// A notification that reaches an idle connection of a ConfigurePool pool
// (LISTEN on it, by the caller) has the next acquire ping it once: the
// ping reads the notification, pgx keeps it for WaitForNotification, the
// connection is kept, and the acquires after it ping no more.
func TestConfiguredPoolPingReadsAPendingNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, counts := pingCountedPool(t, dsn, 1)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testq.OpsListenPeek(ctx, c); err != nil {
		t.Fatal(err)
	}
	pid, err := testq.OpsBackendPid(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if err := testq.OpsNotifyPeek(ctx, admin, "hello"); err != nil {
		t.Fatal(err)
	}

	// The notification reaches the idle session a moment after the commit.
	for deadline := time.Now().Add(5 * time.Second); counts.recentPings.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no acquire pinged the connection a notification reached in 5s")
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		time.Sleep(time.Millisecond)
	}
	c, err = pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := testq.OpsBackendPid(ctx, c); err != nil || got != pid {
		t.Errorf("after the ping the session is %d, %v; want the same session %d", got, err, pid)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n, err := c.Conn().WaitForNotification(wctx)
	if err != nil || n.Channel != "pgadmit_peek" || n.Payload != "hello" {
		t.Errorf("WaitForNotification = %+v, %v; want the notification the ping read", n, err)
	}
	c.Release()
	before := counts.recentPings.Load()
	for range 20 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	if pings := counts.recentPings.Load() - before; pings != 0 {
		t.Errorf("%d of 20 acquires after the notification was read pinged, want 0", pings)
	}
	if s := pool.Stat(); s.NewConnsCount() != 1 {
		t.Errorf("the pool made %d connections, want 1 (the ping replaced none)", s.NewConnsCount())
	}
}

// Behind PgBouncer: in session mode PgBouncer ends a client connection
// whose server session ended, and a ConfigurePool pool replaces it before
// its next statement; in transaction mode the client connection lives on
// and PgBouncer takes another server session for the next statement.
func TestConfiguredPoolBehindPgBouncerReplacesSessionsTheServerEnded(t *testing.T) {
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			pooled, direct := pgtest.NewPoolerURLIn(t, mode, pgtest.PoolerSize)
			replacesEndedSessions(t, direct, pooled+"&default_query_exec_mode=exec", mode == "session")
		})
	}
}
