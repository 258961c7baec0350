package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestLeaseChurnAcrossInstancesNeverExceedsTheLimit: workers on several
// pools (gateway instances) take weighted leases of one scope with short
// TTLs and then renew them (twice at once, with other TTLs), release them
// (twice at once, from another instance, after they expired), commit
// them, or drop them to lapse, while a monitor reads the scope's live
// slots. The live slots never pass the limit; every lease is released once
// (two concurrent releases count one between them); a lease released or
// lapsed is never renewed; and at the end nothing is left: what lapsed
// Recover releases, and no lease of the scope is left unreleased.
func TestLeaseChurnAcrossInstancesNeverExceedsTheLimit(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	ls := limitersOn(pools)
	for _, l := range ls {
		t.Cleanup(l.Close)
	}
	ctx := context.Background()
	model := uniqueKey("churn")
	const limit = 5.0
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)

	stop := make(chan struct{})
	var monitorErr atomic.Value
	var samples atomic.Int64
	var monitor sync.WaitGroup
	monitor.Add(1)
	go func() {
		defer monitor.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			row, err := testq.LeaseLiveByScope(ctx, pools[0], dbtest.LeaseLiveByScopeParams{ScopeType: "model", ScopeKey: model})
			if err != nil {
				monitorErr.Store(err)
				return
			}
			samples.Add(1)
			if row.Slots > limit {
				monitorErr.Store(errors.New("live slots above the limit"))
				t.Errorf("live leases %d holding %v slots, above the limit %v", row.Leases, row.Slots, limit)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	const workers = 24
	deadline := time.Now().Add(4 * time.Second)
	var admitted, refused, lapsed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			l, other := ls[w%len(ls)], ls[(w+1)%len(ls)]
			fail := func(err error) { errs <- err }
			for time.Now().Before(deadline) {
				c := concurrent("model", model, limit)
				c.Amount = []float64{0.5, 1, 1, 2}[rng.IntN(4)]
				c.LeaseTTL = time.Duration(1+rng.IntN(2)) * time.Second
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{c})
				if ok, err := refusedOrNil(err); err != nil {
					fail(err)
					return
				} else if !ok {
					refused.Add(1)
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
					continue
				}
				admitted.Add(1)
				if len(g.Leases) != 1 || g.Leases[0].TTL != c.LeaseTTL {
					fail(errors.New("grant without its one lease and TTL"))
					return
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				switch rng.IntN(6) {
				case 0: // renewed twice at once, with two TTLs
					a, b := g.Leases[0], g.Leases[0]
					b.TTL = 3 * time.Second
					var ra, rb error
					var two sync.WaitGroup
					two.Add(2)
					go func() { defer two.Done(); _, ra = l.RenewLeases(ctx, []ratelimit.Lease{a}) }()
					go func() { defer two.Done(); _, rb = other.RenewLeases(ctx, []ratelimit.Lease{b}) }()
					two.Wait()
					for _, err := range []error{ra, rb} {
						if err != nil && !errors.Is(err, ratelimit.ErrLeaseLost) {
							fail(err)
							return
						}
					}
					fallthrough
				case 1: // released twice at once, from two instances
					var na, nb int
					var ea, eb error
					var two sync.WaitGroup
					two.Add(2)
					go func() { defer two.Done(); na, ea = l.ReleaseLeases(ctx, g.Leases, "done") }()
					go func() { defer two.Done(); nb, eb = other.ReleaseLeases(ctx, g.Leases, "done") }()
					two.Wait()
					if ea != nil || eb != nil || na+nb != 1 {
						fail(errors.Join(ea, eb, errors.New("two concurrent releases of one lease did not release it once")))
						return
					}
				case 2: // committed by another instance
					s, err := other.Commit(ctx, g, nil)
					if err != nil || s.LeasesReleased != 1 {
						fail(errors.Join(err, errors.New("commit did not release the lease once")))
						return
					}
				case 3: // left to lapse
					lapsed.Add(1)
					continue
				case 4: // released, then renewed: lost
					if n, err := l.ReleaseLeases(ctx, g.Leases, "done"); err != nil || n != 1 {
						fail(errors.Join(err, errors.New("release did not release the lease once")))
						return
					}
					renewed, err := other.RenewLeases(ctx, g.Leases)
					var lost *ratelimit.LeaseLostError
					if !errors.As(err, &lost) || len(renewed) != 0 || len(lost.LeaseIDs) != 1 {
						fail(errors.Join(err, errors.New("a released lease was renewed")))
						return
					}
				case 5: // expired, then renewed (lost) and released (once)
					time.Sleep(g.Leases[0].ExpiresAt.Sub(g.DecidedAt) + 50*time.Millisecond)
					renewed, err := l.RenewLeases(ctx, g.Leases)
					if !errors.Is(err, ratelimit.ErrLeaseLost) || len(renewed) != 0 {
						fail(errors.Join(err, errors.New("an expired lease was renewed")))
						return
					}
					if n, err := other.ReleaseLeases(ctx, g.Leases, "late"); err != nil || n != 1 {
						fail(errors.Join(err, errors.New("an expired lease was not released once")))
						return
					}
					if n, err := l.ReleaseLeases(ctx, g.Leases, "late"); err != nil || n != 0 {
						fail(errors.Join(err, errors.New("a lease was released twice")))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	monitor.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	if err, _ := monitorErr.Load().(error); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Logf("admitted %d, refused %d, lapsed %d; %d samples", admitted.Load(), refused.Load(), lapsed.Load(), samples.Load())
	if admitted.Load() < 20 || refused.Load() == 0 {
		t.Fatalf("admitted %d, refused %d: the scope was not contended", admitted.Load(), refused.Load())
	}

	// What lapsed stops counting at its TTL (3 s at most), and Recover
	// releases it; nothing else is left unreleased. The workers have
	// stopped: the live slots only fall, and the first look that finds
	// none is as good as one 3.1 s on.
	for deadline := time.Now().Add(3100 * time.Millisecond); ; time.Sleep(20 * time.Millisecond) {
		row, err := testq.LeaseLiveByScope(ctx, pools[0], dbtest.LeaseLiveByScopeParams{ScopeType: "model", ScopeKey: model})
		if err != nil {
			t.Fatalf("LeaseLiveByScope: %v", err)
		}
		if row.Leases == 0 && row.Slots == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live leases %d holding %v slots 3.1 s after the churn; want none", row.Leases, row.Slots)
		}
	}
	unreleased := func() int64 {
		n, err := db.New().LeaseCountByKeyPrefix(ctx, pools[0], db.LeaseCountByKeyPrefixParams{ScopeType: "model", KeyPrefix: model})
		if err != nil {
			t.Fatalf("LeaseCountByKeyPrefix: %v", err)
		}
		return n
	}
	if n := unreleased(); n != lapsed.Load() {
		t.Fatalf("%d leases unreleased before Recover; want the %d that lapsed", n, lapsed.Load())
	}
	if _, err := ratelimit.NewMaintenance(pools[0]).Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if n := unreleased(); n != 0 {
		t.Fatalf("%d leases unreleased after Recover", n)
	}
}
