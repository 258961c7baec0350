package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A storm of callers who leave while their Reserve statements run: each
// statement is answered after its callers left, so that every grant it
// made goes back as abandoned. Held up (the give-backs' first tries wait),
// the give-backs run GivingBackAtOnce at a time, not a goroutine each for
// all of them; once let go, every one lands: nothing stays reserved or
// open, the counters equal the ledger, nothing is lost.
func TestCancelStormGivesBackEverythingOnBoundedGoroutines(t *testing.T) {
	t.Parallel()
	const maxBatch, maxInFlight, rounds, callers = 2, 1, 24, 6
	bound := ratelimit.GivingBackAtOnce(maxBatch, maxInFlight)
	hold := make(chan struct{})
	tries := &atOnce{hold: hold}
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithCombining(maxBatch, maxInFlight), ratelimit.WithUnheldTryHook(tries.hook))
	var leaveRound atomic.Pointer[context.CancelFunc]
	var sent atomic.Int64
	l.AfterReserveStatements(func(requests int) {
		sent.Add(int64(requests))
		(*leaveRound.Load())() // the round's callers leave before the answer
	})
	key := uniqueKey("storm")
	limits := hourLimits(t, pool, window("api_key", key, "requests", 1000, 1), concurrent("model", key, 1000))
	for range rounds {
		ctx, leave := context.WithCancel(context.Background())
		leaveRound.Store(&leave)
		errs := make(chan error, callers)
		for range callers {
			go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
		}
		for range callers {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("a caller who left: %v, want context.Canceled", err)
			}
		}
		leave()
	}
	abandoned := sent.Load()
	if abandoned <= int64(bound) {
		t.Fatalf("%d grants abandoned, the storm should exceed the bound %d", abandoned, bound)
	}
	tries.awaitHolding(bound)
	if most := tries.mostAtOnce(); most != bound {
		t.Errorf("%d give-backs of %d ran at once, want %d (the bound)", most, abandoned, bound)
	}
	close(hold)
	l.Close() // waits for every give-back
	if lost := l.Stats().Lost; lost != 0 {
		t.Errorf("Stats.Lost %d, want 0", lost)
	}
	s := summary(t, pool)
	if s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.ReservationsReleased != abandoned {
		t.Errorf("%+v; want the %d grants' reservations released, nothing open", s, abandoned)
	}
	assertNothingHeld(t, pool, "api_key", key)
	assertNothingHeld(t, pool, "model", key)
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}
