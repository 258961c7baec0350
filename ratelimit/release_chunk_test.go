package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Prune releases the reservations nobody settled (a gateway that died
// without tasks) in batches of WithPruneBatchSize, 5,000 by default, and
// pgadmit_settle's time grows with the square of the reservations one call
// is given (settleChunk): one call of 8,000 took 6-9 s, holding their
// counters' locks all along. The release steps of Prune and Recover now
// send at most 256 reservations per statement.
func TestPruneReleasesManyStaleReservationsInTimeLinearInThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
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
	start := time.Now()
	res, err := m.Prune(ctx, time.Second)
	took := time.Since(start)
	t.Logf("Prune releasing %d stale reservations: %v", res.ReleasedStaleReservations, took)
	if err != nil || res.ReleasedStaleReservations != reserves*perReserve {
		t.Fatalf("Prune = %+v, %v; want %d stale reservations released", res, err, reserves*perReserve)
	}
	if took > 4*time.Second {
		t.Errorf("Prune releasing %d stale reservations took %v, want well under 4 s", res.ReleasedStaleReservations, took)
	}
	assertDoctorOK(t, pool)
}
