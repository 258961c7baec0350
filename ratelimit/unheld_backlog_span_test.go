package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// With the database unreachable, give-backs far beyond the background's
// bound (half a pool's connections) give up within about one span of
// being handed over, all together, and Close returns then: each one's
// span is timed from its hand-over, not from when its turn came, which
// made Close wait a span (2 s) for every bound's worth of them (40 s for
// 40 on a pool of 4).
func TestUnheldGiveBacksWaitingTheirTurnGiveUpWithinTheirSpan(t *testing.T) {
	t.Parallel()
	const giveBacks = 40
	pool := pgtest.OpenPool(t, pgtest.NewURL(t)+"&pool_max_conns=4") // a bound of 2
	l := ratelimit.New(pool)
	unreachable := errors.New("the database is unreachable")
	start := time.Now()
	for range giveBacks {
		l.GiveBackUnheldInBackground(func(ctx context.Context) error {
			select { // a try that fails after a while, as a dial does
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			return unreachable
		})
	}
	l.Close()
	took := time.Since(start)
	if most := ratelimit.UnheldReleaseSpan + time.Second; took > most {
		t.Errorf("Close returned %v after %d give-backs were handed over with the database unreachable, want within %v (their span, and a try each)", took, giveBacks, most)
	}
	assertLost(t, l, giveBacks, "give-backs that never succeeded")
}
