package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// ownPool and ownConn are Executors of one's own, as a tracing or
// metrics wrapper makes them: they embed what they wrap.
type (
	ownPool struct{ *pgxpool.Pool }
	ownConn struct{ *pgx.Conn }
)

// On an Executor of one's own that wraps a pool, the give-backs run half
// the pool's MaxConns at once, as on the pool itself: they ran 4, a guess,
// whatever the pool (more than half of a pool of 6).
func TestUnheldGiveBacksOnAPoolOfOnesOwnRunHalfItsConnections(t *testing.T) {
	t.Parallel()
	const maxConns, giveBacks = 6, 12
	pool := pgtest.OpenPool(t, pgtest.NewURL(t)+"&pool_max_conns=6")
	hold := make(chan struct{})
	tries := &atOnce{hold: hold}
	l := ratelimit.New(ownPool{pool}, ratelimit.WithUnheldTryHook(tries.hook))
	var ran atomic.Int64
	for range giveBacks {
		l.GiveBackUnheldInBackground(func(ctx context.Context) error {
			ran.Add(1)
			err := pool.Ping(ctx) // a round trip on one of the pool's connections
			return err
		})
	}
	tries.awaitHolding(maxConns / 2)
	if most := tries.mostAtOnce(); most != maxConns/2 {
		t.Errorf("%d give-backs ran at once on a pool of %d of one's own, want %d (half its connections)", most, maxConns, maxConns/2)
	}
	close(hold)
	l.Close()
	if got := ran.Load(); got != giveBacks {
		t.Errorf("%d give-backs ran, want %d", got, giveBacks)
	}
	assertLost(t, l, 0, "give-backs that all succeeded")
}

// On an Executor of one's own that wraps a single connection, the
// Limiter runs one statement at a time, as on the connection itself: a
// give-back runs on its caller's goroutine, before the call returns, and
// nothing is combined. It ran them in the background, beside the
// caller's next statement on the one connection, and combined calls.
func TestAConnOfOnesOwnRunsOneStatementAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	l := ratelimit.New(ownConn{conn})
	defer l.Close()
	var gaveBack atomic.Bool
	l.GiveBackUnheldInBackground(func(ctx context.Context) error {
		time.Sleep(20 * time.Millisecond) // a statement's time: the call waits for it
		err := conn.Ping(ctx)
		gaveBack.Store(err == nil)
		return err
	})
	if !gaveBack.Load() {
		t.Error("the give-back had not run when its call returned: it ran beside the caller, on a single connection")
	}
	key := uniqueKey("own")
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 10, 1)}); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats().Reserve; s.Batches != 0 {
		t.Errorf("Stats().Reserve %+v: a Reserve on a single connection of one's own was combined", s)
	}
	assertLost(t, l, 0, "a give-back that succeeded")
}
