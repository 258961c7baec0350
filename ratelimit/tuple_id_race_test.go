package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_settle_one and pgadmit_renew_leases find their row by primary key,
// test it, and update it by tuple id; the settle takes its counter lock in
// the same statement, so the row it tested may be older than the one it
// updates. Raced here over several pools: the Commit of a task's reservation
// (pgadmit_settle_one, no combining) against Recover releasing it for the
// task's expired execution lease, and the renewal of the task's lease against
// ReleaseLeases and Recover releasing it. Each reservation ends settled once,
// by one of them (committed with its actual amount, or released), each lease
// is released once, the counter holds exactly what was committed, and Doctor
// is clean.
func TestSettleOneAndRenewRaceRecoverRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 3)
	var clock testClock
	ls := make([]*ratelimit.Limiter, len(pools))
	ms := make([]*ratelimit.Maintenance, len(pools))
	for i, pool := range pools {
		ls[i] = ratelimit.New(pool, ratelimit.WithClock(clock.now), ratelimit.WithoutCombining())
		ms[i] = ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now), ratelimit.WithRecoveryBatchSize(2))
	}
	key := uniqueKey("k")
	win := window("key", key, "tokens", 1e12, 10)
	win.Window = pgtest.WindowWithRoom(t, pools[0], time.Hour, 5*time.Minute)
	conc := concurrent("key", key, 1e9)
	conc.LeaseTTL = time.Hour

	// At least minRounds; more, up to maxRounds, until each side has won
	// once (on a loaded machine one side can win a dozen rounds whole).
	const minRounds, maxRounds, perRound, actual = 12, 40, 8, 7
	var commitsWon, leasesReleasedByCall, total atomic.Int64
	var recovered struct {
		sync.Mutex
		ratelimit.RecoveryResult
		took time.Duration // the longest pass of this round
	}
	// spread is how long the racing Recover passes of the last round took,
	// at most: in a round where Recover goes first, each Commit waits a
	// random part of it, so that Commits land all along Recover's pass.
	// Without it, on a loaded machine Commit won every row of 40 rounds.
	var spread atomic.Int64
	recoverOn := func(m *ratelimit.Maintenance) {
		start := time.Now()
		res, err := m.Recover(ctx)
		recovered.Lock()
		defer recovered.Unlock()
		recovered.took = max(recovered.took, time.Since(start))
		if err != nil {
			t.Errorf("Recover: %v", err)
			return
		}
		recovered.ReleasedRateReservations += res.ReleasedRateReservations
		recovered.ReleasedConcurrencyLeases += res.ReleasedConcurrencyLeases
	}
	raced := func() bool {
		recovered.Lock()
		defer recovered.Unlock()
		return commitsWon.Load() > 0 && recovered.ReleasedRateReservations > 0
	}
	rounds := 0
	for ; rounds < minRounds || (rounds < maxRounds && !raced()); rounds++ {
		round := rounds
		type held struct{ win, conc ratelimit.Grant }
		grants := make([]held, perRound)
		var expiry time.Time
		for i := range grants {
			l := ls[i%len(ls)]
			task := startSync(t, l, time.Second)
			expiry = latest(expiry, task.LeaseExpiresAt)
			var err error
			if grants[i].win, err = l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{win}); err != nil {
				t.Fatalf("round %d: Reserve(window): %v", round, err)
			}
			if grants[i].conc, err = l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{conc}); err != nil {
				t.Fatalf("round %d: Reserve(concurrent): %v", round, err)
			}
		}
		total.Add(perRound)
		clock.pass(expiry) // every task's execution lease has expired: Recover reclaims them

		var wg sync.WaitGroup
		recoverFirst := round%2 == 1
		recovered.Lock()
		recovered.took = 0
		recovered.Unlock()
		if recoverFirst {
			for _, m := range ms {
				wg.Go(func() { recoverOn(m) })
			}
		}
		for i, g := range grants {
			wg.Go(func() {
				if d := spread.Load(); recoverFirst && d > 0 {
					time.Sleep(time.Duration(rand.Int64N(d)))
				}
				s, err := ls[(i+1)%len(ls)].Commit(ctx, g.win, map[string]float64{"tokens": actual})
				if err != nil {
					t.Errorf("Commit: %v", err)
					return
				}
				o := s.Reservations[0]
				switch {
				case o.Settled && o.Status == ratelimit.StatusCommitted && o.Actual == actual:
					commitsWon.Add(1)
				case !o.Settled && o.Status == ratelimit.StatusReleased:
				default:
					t.Errorf("Commit outcome %+v: want committed by it, or released by Recover", o)
				}
			})
			wg.Go(func() {
				lost := false // a released lease stays released: once lost, never renewed
				for range 3 {
					renewed, err := ls[(i+2)%len(ls)].RenewLeases(ctx, g.conc.Leases)
					switch {
					case errors.Is(err, ratelimit.ErrLeaseLost):
						lost = true
					case err != nil:
						t.Errorf("RenewLeases: %v", err)
					case lost || len(renewed) != 1:
						t.Errorf("RenewLeases renewed %d lease(s) after losing it: %v", len(renewed), lost)
					}
				}
			})
			if i%2 == 0 {
				wg.Go(func() {
					n, err := ls[i%len(ls)].ReleaseLeases(ctx, g.conc.Leases, "test")
					if err != nil {
						t.Errorf("ReleaseLeases: %v", err)
					}
					leasesReleasedByCall.Add(int64(n))
				})
			}
		}
		if !recoverFirst {
			for _, m := range ms {
				wg.Go(func() { recoverOn(m) })
			}
		}
		wg.Wait()
		recovered.Lock()
		spread.Store(int64(recovered.took))
		recovered.Unlock()
		recoverOn(ms[round%len(ms)]) // what the racing runs left (one runs at a time)
	}

	s := summary(t, pools[0])
	n := total.Load()
	if s.ReservationsOpen != 0 || s.ReservationsCommitted != commitsWon.Load() ||
		s.ReservationsReleased != recovered.ReleasedRateReservations || s.ReservationsCommitted+s.ReservationsReleased != n {
		t.Errorf("reservations: %d open, %d committed (Commit won %d), %d released (Recover released %d); want %d in all",
			s.ReservationsOpen, s.ReservationsCommitted, commitsWon.Load(), s.ReservationsReleased, recovered.ReleasedRateReservations, n)
	}
	if s.LeasesUnreleased != 0 || leasesReleasedByCall.Load()+recovered.ReleasedConcurrencyLeases != n {
		t.Errorf("leases: %d unreleased; released %d by ReleaseLeases and %d by Recover, want %d in all",
			s.LeasesUnreleased, leasesReleasedByCall.Load(), recovered.ReleasedConcurrencyLeases, n)
	}
	if s.CountersReserved != 0 || s.CountersUsed != float64(actual*commitsWon.Load()) {
		t.Errorf("counters: reserved %v, used %v; want 0 and %v", s.CountersReserved, s.CountersUsed, actual*commitsWon.Load())
	}
	t.Logf("%d rounds: Commit won %d, Recover released %d", rounds, commitsWon.Load(), recovered.ReleasedRateReservations)
	if !raced() {
		t.Errorf("no race: Commit won %d, Recover released %d", commitsWon.Load(), recovered.ReleasedRateReservations)
	}
	assertBooksBalance(t, pools[0], "key", key)
	assertDoctorOK(t, pools[0])
}
