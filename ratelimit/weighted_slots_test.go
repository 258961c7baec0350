package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A concurrent limit's Amount is a weight: a request may hold 2.5 slots or
// half of one, and the leases' weights never sum past the limit. 64
// goroutines on four pools ask for 2.5 slots of 10 (four fit), then for 0.5
// of what is left after one lease is released (five fit).
func TestWeightedSlotsSumExactlyToTheLimit(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	ls := limitersOn(pools)
	model := uniqueKey("model")
	heavy := concurrent("model", model, 10)
	heavy.Amount, heavy.LeaseTTL = 2.5, time.Hour

	var admitted, refused atomic.Int64
	var first atomic.Pointer[ratelimit.Grant]
	hammer(t, ls, func(l *ratelimit.Limiter, _ int) error {
		grant, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{heavy})
		ok, err := refusedOrNil(err)
		if ok {
			admitted.Add(1)
			first.CompareAndSwap(nil, &grant)
		} else if err == nil {
			refused.Add(1)
		}
		return err
	})
	assertSlots(t, pools[0], model, 4, 10)
	if admitted.Load() != 4 || refused.Load() != goroutines-4 {
		t.Fatalf("2.5 slots of 10: admitted %d, refused %d; want 4 and %d", admitted.Load(), refused.Load(), goroutines-4)
	}

	if _, err := ls[0].Release(context.Background(), *first.Load(), "test"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	light := heavy
	light.Amount = 0.5
	admitted.Store(0)
	refused.Store(0)
	hammer(t, ls, func(l *ratelimit.Limiter, _ int) error {
		return reserveTimes(l, 1, light, &admitted, &refused)
	})
	assertSlots(t, pools[0], model, 3+5, 10)
	if admitted.Load() != 5 {
		t.Fatalf("0.5 slots of the 2.5 left: admitted %d; want 5", admitted.Load())
	}
}

// assertSlots checks the live leases of model: how many, and the slots
// their weights add up to.
func assertSlots(t *testing.T, conn db.DBTX, model string, leases int64, slots float64) {
	t.Helper()
	row, err := testq.LeaseLiveByScope(context.Background(), conn, dbtest.LeaseLiveByScopeParams{ScopeType: "model", ScopeKey: model})
	if err != nil {
		t.Fatalf("LeaseLiveByScope: %v", err)
	}
	if row.Leases != leases || row.Slots != slots {
		t.Fatalf("live leases %d holding %v slots; want %d holding %v", row.Leases, row.Slots, leases, slots)
	}
}
