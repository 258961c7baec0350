package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// givenBackWithin bounds how long after CheckPooler returned the connection its probe took is
// back in the pool (given back or dropped): nothing is waited for then.
const givenBackWithin = time.Second

// The connection of the caller's pool that CheckPooler's probe took is back in the pool as
// CheckPooler returns, also when the probe gave up on a statement of it (at its own bound, or
// when ctx ended). pgx closes a connection given up on mid-statement in the background: it
// sends a cancel request on a connection of its own, waits up to 15 s for it to be answered,
// and only then says goodbye; the pool waited for that before it counted the connection gone,
// so that a pool of two had one for up to 15 s after CheckPooler returned, and a caller
// retrying the check could hold several. A PgBouncer 1.18 whose server connections are all
// kept answers a cancel request for a statement in its queue at once (the first two cases), but
// one for a statement it forwarded only once a server connection comes free (PgBouncer's own
// test_cancel_wait), which a freezer in front of it stands for here, holding every answer
// and new connection.
func TestCheckPoolerGivesTheProbeConnectionBackWhenItGivesUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// serverConns is how many server connections the PgBouncer opens (pool_size).
		serverConns int
		// check runs CheckPooler on a pool of two connections and returns its error and what
		// it must match.
		check func(t *testing.T, cfg *pgxpool.Config) (pool *pgxpool.Pool, err, want error)
	}{
		// Behind a PgBouncer in session mode whose one server connection the check's own
		// connection keeps, the probe's statement waits in PgBouncer's queue.
		{"queued by PgBouncer, the probe's own bound", 1, func(t *testing.T, cfg *pgxpool.Config) (*pgxpool.Pool, error, error) {
			pool := poolsFrom(t, cfg, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return pool, ratelimit.CheckPooler(ctx, pool), ratelimit.ErrPoolerUnknown
		}},
		{"queued by PgBouncer, ctx ended", 1, func(t *testing.T, cfg *pgxpool.Config) (*pgxpool.Pool, error, error) {
			pool := poolsFrom(t, cfg, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // before the probe's 5 s
			defer cancel()
			return pool, ratelimit.CheckPooler(ctx, pool), context.DeadlineExceeded
		}},
		// The prober's second statement and the cancel request for it get no answer.
		{"cancel request unanswered, ctx ended", 3, func(t *testing.T, cfg *pgxpool.Config) (*pgxpool.Pool, error, error) {
			fr, pool := freezer.NewPool(t, cfg, nil)
			fr.FreezeAt(probeText, checkSends+probeSends)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs := checkPoolerUntilFrozen(t, ctx, fr, pool)
			cancel()
			select {
			case err := <-errs:
				return pool, err, context.Canceled
			case <-time.After(frozenPoolerEnd):
				t.Fatalf("CheckPooler did not end %s after its context", frozenPoolerEnd)
				return nil, nil, nil
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pooled, _ := pgtest.NewPoolerURLIn(t, "session", c.serverConns)
			cfg := modeConfig(t, pooled, pgx.QueryExecModeCacheStatement)
			cfg.MaxConns = 2
			pool, err, want := c.check(t, cfg)
			returned := time.Now()
			if !errors.Is(err, want) {
				t.Fatalf("CheckPooler = %v, want an error matching %v", err, want)
			}
			for {
				s := pool.Stat()
				if s.AcquiredConns() == 0 && s.ConstructingConns() == 0 {
					t.Logf("the probe's connection was back %s after CheckPooler returned", time.Since(returned).Round(time.Millisecond))
					return
				}
				if time.Since(returned) > givenBackWithin {
					t.Fatalf("%s after CheckPooler returned (%v) the pool of %d still counts %d connections acquired and %d being opened, want none",
						givenBackWithin, err, cfg.MaxConns, s.AcquiredConns(), s.ConstructingConns())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
