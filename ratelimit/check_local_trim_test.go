package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestCheckOfALocalLimitCountsThisLimitersBlockAsReserved pins where Check
// and Reserve differ by design (documented on Check): a Local limit that
// this Limiter's block has too little room for is checked against its
// window, which counts the block's unused units as reserved; Reserve
// instead trims the block to what it admitted, giving those units back to
// the window, and takes a new block from them. So Check refuses an amount
// above what the window has free but within that plus the block's unused
// units, which Reserve admits. Past that, the two agree again.
func TestCheckOfALocalLimitCountsThisLimitersBlockAsReserved(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("trim")
	reserveLocal(t, l, hour, key, 1600, 1)
	blocks, err := testq.AllotmentListByScope(ctx, pool, dbtest.AllotmentListByScopeParams{ScopeType: "model", ScopeKey: key})
	if err != nil || len(blocks) != 1 {
		t.Fatalf("AllotmentListByScope: %+v, %v; want one block", blocks, err)
	}
	granted := blocks[0].Granted // 1 of it admitted, granted-1 unused
	other := ratelimit.New(pool)
	rest := window("model", key, ratelimit.MetricTokens, 1600, 1600-granted-10)
	rest.Window = hour
	if _, err := other.Reserve(ctx, "", "", []ratelimit.Limit{rest}); err != nil {
		t.Fatalf("filling the window: %v", err)
	}
	// 10 free in the window, granted-1 unused in the block: granted+5 fits
	// the two together, neither alone.
	lim := localWindow(hour, key, 1600, granted+5)
	var ce *ratelimit.ExceededError
	if err := l.Check(ctx, []ratelimit.Limit{lim}); !errors.As(err, &ce) || ce.Reserved != 1600-10-granted+granted || ce.Used != 0 {
		t.Fatalf("Check: %v; want a refusal counting the block's %v units as reserved", err, granted)
	}
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
	if err != nil || !g.Reservations[0].Local {
		t.Fatalf("Reserve: %+v, %v; want it admitted from a new block", g, err)
	}
	checkThenReserve(t, l, pool, []ratelimit.Limit{localWindow(hour, key, 1600, granted+5)}, "window and blocks spent")
}
