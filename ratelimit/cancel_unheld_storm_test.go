package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A storm of callers who leave while their Reserve statements wait behind
// a lock, on several gateway instances that send each call alone
// (WithoutCombining), round after round: every statement commits once
// the lock is let go, after its caller left, so that every grant goes
// back in the background (giveBackUnheld). Held up (each give-back's
// first try waits), the give-backs of an instance run at most half its
// pool's connections at once, each on a goroutine, the rest waiting
// their turn: they used to start a goroutine each, with no bound, whose
// Release statements took as many of the pool's connections as they could
// get, ahead of the live calls queued for one. Once let go, every one
// lands before Close returns: nothing stays reserved or open, the
// counters equal the ledger, nothing is lost, the doctor finds nothing.
// Not parallel: it counts the process's goroutines.
func TestCancelStormWithoutCombiningGivesBackOnBoundedGoroutines(t *testing.T) {
	const instances, maxConns, rounds = 3, 8, 3
	const bound = maxConns / 2 // of a pool's connections, for give-backs
	bg := context.Background()
	base := pgtest.NewPool(t)
	hold := make(chan struct{})
	var tries [instances]atOnce
	var letGo sync.Once
	release := func() { letGo.Do(func() { close(hold) }) }
	pools := make([]*pgxpool.Pool, instances)
	ls := make([]*ratelimit.Limiter, instances)
	for i := range instances {
		cfg := base.Config()
		cfg.MaxConns = maxConns
		pool, err := pgxpool.NewWithConfig(bg, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools[i] = pool
		tries[i].hold = hold
		ls[i] = ratelimit.New(pool, ratelimit.WithoutCombining(), ratelimit.WithLeftStatementGrace(time.Minute),
			ratelimit.WithUnheldTryHook(tries[i].hook))
	}
	defer release() // on a failure before the end
	key := uniqueKey("storm")
	limits := hourLimits(t, base, window("api_key", key, "requests", 1000, 1), concurrent("model", key, 1000))

	var conns []*pgxpool.Conn // every connection opened: what goroutines they start are counted before
	for _, pool := range pools {
		for range maxConns {
			c, err := pool.Acquire(bg)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		c.Release()
	}
	before := runtime.NumGoroutine()

	const callers = instances * maxConns // a round's: each on a connection of its own
	for round := range rounds {
		blocker, err := base.Begin(bg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = blocker.Rollback(bg) }() // on a failure before the round's end
		if _, err := ratelimit.New(base).WithTx(blocker).Reserve(bg, "", "", limits); err != nil {
			t.Fatal(err)
		}
		ctx, leave := context.WithCancel(bg)
		defer leave() // on a failure before the round's end, first: the callers leave, then the lock goes
		errs := make(chan error, callers)
		for _, l := range ls {
			for range maxConns {
				go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
			}
		}
		pgtest.AwaitLockWaiterCount(t, base, callers, fmt.Sprintf("round %d: the Reserve statements", round))
		leave() // every caller leaves while its statement waits; each commits after
		if err := blocker.Rollback(bg); err != nil {
			t.Fatal(err)
		}
		for range callers {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: a caller who left: %v, want context.Canceled", round, err)
			}
		}
	}
	abandoned := int64(rounds * callers)
	perInstance := rounds * maxConns
	if perInstance <= bound {
		t.Fatalf("%d give-backs an instance: the storm should exceed the bound %d", perInstance, bound)
	}

	for i := range tries {
		tries[i].awaitHolding(bound)
	}
	// Each give-back running waits in the hook on a goroutine of its own;
	// one waiting its turn has none. The callers have all returned.
	if more, want := runtime.NumGoroutine()-before, instances*bound; more > want+goroutineSlack {
		t.Errorf("%d goroutines more than before the storm, want %d (the give-backs running) or about", more, want)
	}
	for i := range tries {
		if most := tries[i].mostAtOnce(); most != bound {
			t.Errorf("instance %d: %d of its %d give-backs ran at once, each on a goroutine, want %d (half its pool's %d connections)",
				i, most, perInstance, bound, maxConns)
		}
	}

	release()
	for _, l := range ls {
		l.Close() // waits for every give-back
	}
	for i, l := range ls {
		if lost := l.Stats().Lost; lost != 0 {
			t.Errorf("instance %d: Stats.Lost %d, want 0", i, lost)
		}
	}
	s := summary(t, base)
	if s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 || s.ReservationsReleased != abandoned {
		t.Errorf("after Close: %+v; want the %d grants' reservations released, nothing open or reserved", s, abandoned)
	}
	assertNothingHeld(t, base, "api_key", key)
	assertNothingHeld(t, base, "model", key)
	assertDoctorOK(t, base)
}

// goroutineSlack is how many goroutines a storm test lets come and go
// beside those it counts: a pool's, a connection's background reader, a
// timer's.
const goroutineSlack = 8
