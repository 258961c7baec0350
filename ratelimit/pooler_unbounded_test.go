package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// frozenCheckBound bounds how long CheckPooler with a context that never ends takes on a server
// that stopped answering: a clean-up (5 s at most, and a second for ConfigurePool's cancel
// request left unanswered) and a wait for an answer (5 s at most), with a second to spare.
const frozenCheckBound = 12 * time.Second

// CheckPooler(context.Background(), pool) on a server that stops answering anywhere in it (frozen
// as a client of the check sends for the nth time, for every n until the check ends before it)
// ends within frozenCheckBound, whatever it was waiting for: a connection's start-up, a statement
// in a transaction it holds, a clean-up. Its bounds (5 s for a server session, 2 s for the
// prober's second statement, 5 s for a clean-up) left the other waits to ctx, and with no
// deadline it waited for ever for the holder's connection and for each of the holder's
// statements in its transactions (7 of the 13 sends of a check on a direct connection). The
// checks wait out their bounds a dozen at once, not one after the other.
func TestCheckPoolerWithoutADeadlineEndsOnAFrozenServer(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	const sends = 25 // more than a check on a direct connection sends
	// Checks at once: each holds up to two server connections until it ends, and the database
	// server's max_connections (100 on the machine's) is shared with the tests running beside
	// this one.
	slots := make(chan struct{}, 12)
	var wg sync.WaitGroup
	for _, s := range frozenPoolerSetups {
		var unfrozen atomic.Int32
		var checks sync.WaitGroup
		for n := 1; n <= sends; n++ {
			fr, pool := freezer.NewPool(t, cfg, s.configure) // connects on first use
			fr.FreezeAt("", n)                               // every send holds the empty text
			checks.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				defer func() { fr.Close(); pool.Close() }() // its server connections end with it
				errs := make(chan error, 1)
				go func() { errs <- ratelimit.CheckPooler(context.Background(), pool) }()
				select {
				case <-fr.SentFrozen():
				case err := <-errs:
					if err != nil {
						t.Errorf("%s: CheckPooler on a direct connection = %v, want nil", s.name, err)
					}
					unfrozen.Add(1)
					return
				}
				frozen := time.Now()
				select {
				case err := <-errs:
					t.Logf("%s, frozen at send %d: CheckPooler ended %s after the freeze: %v", s.name, n, time.Since(frozen).Round(time.Millisecond), err)
				case <-time.After(frozenCheckBound):
					t.Errorf("%s: CheckPooler(context.Background()) on a server frozen at its send %d: not ended %s after the freeze", s.name, n, frozenCheckBound)
				}
			})
		}
		wg.Go(func() {
			checks.Wait()
			if unfrozen.Load() == 0 {
				t.Errorf("%s: every one of %d sends froze the check: it sends more, and the sends after %d were not tried", s.name, sends, sends)
			}
		})
	}
	wg.Wait()
}

// CheckPooler(context.Background(), pool) on a pool whose every connection is in use (one, here,
// held by the test) gives up waiting for one after a few seconds, saying it could not tell and
// why: it used to wait for ever for the probe's connection.
func TestCheckPoolerWithoutADeadlineOnAPoolInUse(t *testing.T) {
	t.Parallel()
	cfg := modeConfig(t, pgtest.NewURL(t), pgx.QueryExecModeCacheStatement)
	cfg.MaxConns = 1
	pool := poolsFrom(t, cfg, 1)[0]
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	errs := make(chan error, 1)
	go func() { errs <- ratelimit.CheckPooler(context.Background(), pool) }()
	select {
	case err := <-errs:
		if !errors.Is(err, ratelimit.ErrPoolerUnknown) || !strings.Contains(err.Error(), "no connection of the pool") {
			t.Errorf("CheckPooler(context.Background()) on a pool in use = %v, want ErrPoolerUnknown saying no connection of the pool came free", err)
		}
	case <-time.After(frozenCheckBound):
		t.Errorf("CheckPooler(context.Background()) on a pool in use: not ended within %s", frozenCheckBound)
	}
}
