package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestCheckAgreesWithReserveOnALocalLimitThisLimiterHoldsABlockOf: a Local
// limit whose window is full in the database, because this Limiter holds a
// block of it with room, is admitted by Reserve from that block: Check must
// not refuse it.
func TestCheckAgreesWithReserveOnALocalLimitThisLimiterHoldsABlockOf(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("local")
	// A first Local admission takes a block; another Limiter then fills
	// what the window has left, in the database.
	reserveLocal(t, l, hour, key, 1600, 1)
	blocks, err := testq.AllotmentListByScope(ctx, pool, dbtest.AllotmentListByScopeParams{ScopeType: "model", ScopeKey: key})
	if err != nil || len(blocks) == 0 {
		t.Fatalf("AllotmentListByScope: %+v, %v; want a block", blocks, err)
	}
	var granted float64
	for _, b := range blocks {
		granted += b.Granted
	}
	other := ratelimit.New(pool)
	rest := window("model", key, ratelimit.MetricTokens, 1600, 1600-granted)
	rest.Window = hour
	if _, err := other.Reserve(ctx, "", "", []ratelimit.Limit{rest}); err != nil {
		t.Fatalf("filling the window: %v", err)
	}
	checkThenReserve(t, l, pool, []ratelimit.Limit{localWindow(hour, key, 1600, 1)}, "block with room, window full")
	// Limits the block cannot serve are decided in the database, by both:
	// an amount above the block's share of the limit, a limit below the one
	// the block was taken under.
	checkThenReserve(t, l, pool, []ratelimit.Limit{localWindow(hour, key, 1600, 200)}, "amount above MaxShare")
	// Reserve first sets the block aside and trims it to what it admitted
	// (its unused units leave the window) before the database refuses: the
	// same limit is refused, with what the window holds after the trim.
	checkErr := l.Check(ctx, []ratelimit.Limit{localWindow(hour, key, 1500, 1)})
	_, reserveErr := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1500, 1)})
	var ce, re *ratelimit.ExceededError
	if !errors.As(checkErr, &ce) || !errors.As(reserveErr, &re) || ce.ScopeKey != re.ScopeKey || ce.Limit != re.Limit || ce.Current < re.Current {
		t.Fatalf("limit lowered below the block's: Check: %v; Reserve: %v; want both to refuse it", checkErr, reserveErr)
	}
	// Another Limiter holds no block: the database decides, and refuses.
	other2 := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(other2.Close)
	checkThenReserve(t, other2, pool, []ratelimit.Limit{localWindow(hour, key, 1600, 1)}, "another Limiter's block, window full")
}
