package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover reclaims expired tasks in batches of up to 500 tasks, and the
// reservations of one batch's tasks were released in one call of
// pgadmit_settle, whose time grows with the square of the reservations it
// is given: 1,000 tasks holding 8 each took 4.4 s. They are now released
// 256 at most per call, all calls in the batch's one round trip.
func TestRecoverReleasesAReclaimedBatchsReservationsInBoundedCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, sizes := settleSizedPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)

	const tasks, perTask = 100, 8 // 800 reservations, one reclaim batch
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < tasks; i += 8 {
				task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "dies", LeaseTTL: time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				limits := make([]ratelimit.Limit, perTask)
				for k := range limits {
					limits[k] = window("api_key", fmt.Sprintf("reclaim-%d-%d", k, i%10), ratelimit.MetricTokens, 1e9, 7)
				}
				if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); err != nil {
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
	sizes.reset()
	res, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if res.FailedTasks != tasks || res.ReleasedRateReservations != tasks*perTask {
		t.Fatalf("Recover = %+v; want %d tasks failed and %d reservations released", res, tasks, tasks*perTask)
	}
	if most, n := sizes.largest(); most > 256 || n < tasks*perTask/256 {
		t.Errorf("Recover released %d reservations in %d settle statements of up to %d each; want at most 256 each", tasks*perTask, n, most)
	}
	if s := summary(t, pool); s.ReservationsOpen != 0 || s.CountersReserved != 0 {
		t.Errorf("%d reservations left open, %v units reserved in the counters", s.ReservationsOpen, s.CountersReserved)
	}
	assertDoctorOK(t, pool)
}
