package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// PruneCounters deletes the counters it locked by tuple id. Raced here:
// gateways on two pools reserve and commit, each grant on an hour window
// (still running) and a 1 s window, while Prune, in batches of 2, deletes
// the 1 s windows as they are charged: its clock runs 10 s ahead of the
// database's, on which Reserve picks its window, so it judges every 1 s
// window ended. A counter its statement saw with nothing reserved is charged
// (reserved, or reserved and committed) before its lock, which then takes
// the newer row: it is kept if that holds a reservation, and skipped anyway
// (its tuple id is not visible to the statement's snapshot). No counter
// holding a reservation is ever deleted (Doctor, after each run, finds no
// open reservation without its counter, nor a reserved value off its
// ledger; every Commit succeeds); no counter of the hour window is deleted,
// and each ends equal to what was committed on it; once the traffic stops,
// one more Prune leaves books Doctor finds clean. (Mid-run, a 1 s window
// pruned and charged again has fewer used than its ledger, whose committed
// rows go only with the counter: that Doctor may report.)
func TestPruneCountersRacesAdmissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 3)
	var clock testClock
	clock.advance(10 * time.Second)
	m := ratelimit.NewMaintenance(pools[2], ratelimit.WithMaintenanceClock(clock.now), ratelimit.WithPruneBatchSize(2))
	ls := []*ratelimit.Limiter{ratelimit.New(pools[0]), ratelimit.New(pools[1])}
	hourKeys := []string{uniqueKey("hour"), uniqueKey("hour")}
	secondKeys := []string{uniqueKey("second"), uniqueKey("second"), uniqueKey("second")}
	const amount = 3
	// The hour window (an hour or a few minutes more) must outlast the run
	// and Prune's cutoff, 9 s ahead.
	hourWindow := pgtest.WindowWithRoom(t, pools[0], time.Hour, 2*time.Minute)

	const workers, minRounds, minPruned = 6, 300, 20
	var (
		stop, rounds, pruned, secondCommits atomic.Int64
		hourCommits                         [2]atomic.Int64
	)
	done := func() bool { return stop.Load() != 0 }
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			l := ls[w%len(ls)]
			for i := 0; !done(); i++ {
				h, s := (w+i)%len(hourKeys), (w+i)%len(secondKeys)
				hour := window("api_key", hourKeys[h], ratelimit.MetricTokens, 1e12, amount)
				hour.Window = hourWindow
				second := window("api_key", secondKeys[s], ratelimit.MetricRequests, 1e12, amount)
				second.Window = time.Second
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{hour, second})
				if err != nil {
					t.Errorf("Reserve: %v", err)
					stop.Store(1)
					return
				}
				set, err := l.Commit(ctx, g, nil)
				if err != nil {
					t.Errorf("Commit: %v", err)
					stop.Store(1)
					return
				}
				if o := set.Reservations[0]; o.Settled && o.Status == ratelimit.StatusCommitted && o.Actual == amount {
					hourCommits[h].Add(1)
				} else {
					t.Errorf("Commit of the hour window's reservation: %+v, want it committed by the call", o)
				}
				switch o := set.Reservations[1]; {
				case o.Settled && o.Status == ratelimit.StatusCommitted && o.Actual == amount:
					secondCommits.Add(1)
				case !o.Settled && o.Status == ratelimit.StatusReleased: // by Prune, as stale
				case !o.Settled && o.Status == ratelimit.StatusUnknown: // released by Prune, then pruned
				default:
					t.Errorf("Commit of the 1 s window's reservation: %+v, want it committed by the call, or released by Prune", o)
				}
				rounds.Add(1)
			}
		})
	}
	wg.Go(func() {
		deadline := time.Now().Add(2 * time.Minute)
		for !done() {
			res, err := m.Prune(ctx, time.Second)
			if err != nil {
				t.Errorf("Prune: %v", err)
				stop.Store(1)
				return
			}
			pruned.Add(res.Counters)
			report, err := m.Doctor(ctx)
			if err != nil {
				t.Errorf("Doctor: %v", err)
				stop.Store(1)
				return
			}
			for _, p := range report.Problems {
				if p.Kind != ratelimit.ProblemCounterUsed || p.Window != time.Second {
					t.Errorf("Doctor while Prune races admissions: %s", p)
					stop.Store(1)
				}
			}
			switch {
			case rounds.Load() >= minRounds && pruned.Load() >= minPruned:
				stop.Store(1)
			case time.Now().After(deadline):
				t.Errorf("after 2 minutes: %d rounds, %d counters pruned; want at least %d and %d", rounds.Load(), pruned.Load(), minRounds, minPruned)
				stop.Store(1)
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}

	// The traffic has stopped: what the 1 s windows left goes.
	if _, err := m.Prune(ctx, time.Second); err != nil {
		t.Fatalf("Prune after the traffic: %v", err)
	}
	assertDoctorOK(t, pools[2])
	if s := summary(t, pools[2]); s.ReservationsOpen != 0 || s.CountersReserved != 0 {
		t.Errorf("after the traffic: %d reservations open, %v reserved; want none", s.ReservationsOpen, s.CountersReserved)
	}
	for _, key := range secondKeys {
		if rows := counterRows(t, pools[2], "api_key", key); len(rows) != 0 {
			t.Errorf("1 s windows of %s left after the last Prune: %+v", key, rows)
		}
	}
	for h, key := range hourKeys {
		rows := counterRows(t, pools[2], "api_key", key)
		if want := float64(amount * hourCommits[h].Load()); len(rows) != 1 || rows[0].UsedValue != want || rows[0].ReservedValue != 0 {
			t.Errorf("hour window of %s: %+v; want one counter, %v used, nothing reserved", key, rows, want)
		}
		assertBooksBalance(t, pools[2], "api_key", key)
	}
	t.Logf("%d rounds: %d 1 s reservations committed, %d counters pruned meanwhile", rounds.Load(), secondCommits.Load(), pruned.Load())
}
