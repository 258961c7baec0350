package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Prune releases the reservations nobody settled (a gateway that died
// without tasks) in batches of WithPruneBatchSize, 5,000 by default, and
// up to migration 00016 pgadmit_settle's time grew with the square of the
// reservations one call is given (settleChunk): one call of 8,000 took
// 6-9 s, holding their counters' locks all along. The release steps of
// Prune and Recover now send at most 256 reservations per statement.
//
// The test counts what each statement is given, where it used to bound
// Prune's time (4 s): since 00016 the function is linear, and one call of
// the 8,000 took about as long as 32 calls (1 s), so the bound no longer
// told the two apart; at load 17 the 32 calls took 3.3 s, near it.
func TestPruneReleasesManyStaleReservationsInBoundedCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, settles := settleSizedPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithPruneBatchSize(8000))
	const reserves, perReserve = 2000, 4 // 8,000 reservations on 400 keys
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < reserves; i += 16 {
				limits := make([]ratelimit.Limit, perReserve)
				for k := range limits {
					limits[k] = secondWindow(fmt.Sprintf("stale-%d-%d", k, i%100), 1)
				}
				if _, err := l.Reserve(ctx, "", "", limits); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	clock.advance(time.Minute)
	settles.reset()
	start := time.Now()
	res, err := m.Prune(ctx, time.Second)
	took := time.Since(start)
	t.Logf("Prune releasing %d stale reservations: %v", res.ReleasedStaleReservations, took)
	if err != nil || res.ReleasedStaleReservations != reserves*perReserve {
		t.Fatalf("Prune = %+v, %v; want %d stale reservations released", res, err, reserves*perReserve)
	}
	if most, calls := settles.largest(); most > 256 {
		t.Errorf("Prune released %d stale reservations in %d calls of pgadmit_settle, up to %d in one; want 256 at most in each",
			res.ReleasedStaleReservations, calls, most)
	}
	assertDoctorOK(t, pool)
}
