package httpadmit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A lease of a request in flight can be lost (released by an operator,
// expired while the database was away): RenewLeases reports it once with a
// LeaseLostError. The middleware sent it again on every later renewal, so
// each one of that request failed (its other leases renewed, yet every
// call counted as an error) and the LeasesHeld gauge kept counting it until
// the settle. A lost lease is no longer renewed and is taken out of the
// gauge when it is reported lost; the request is still settled as before.
func TestALostLeaseIsReportedOnceAndNoLongerRenewed(t *testing.T) {
	t.Parallel()
	for name, leases := range map[string]int{"one of two leases": 2, "its only lease": 1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			// The first lease, the one lost, has a TTL of 1 s: renewed every 333 ms while it is
			// held. The other, which must stay held, has 3 s (renewed every 1 s once it is alone):
			// with 1 s, a renewal late by 667 ms (a loaded machine) found it expired, a second
			// failed renewal.
			var limits []httpadmit.Limit
			for i := range leases {
				slot := concurrent("model", uniqueKey("model"), 10)
				slot.LeaseTTL = time.Second
				if i > 0 {
					slot.LeaseTTL = 3 * time.Second
				}
				limits = append(limits, slot)
			}
			renewals := e.obs.renewals
			h := e.middleware(fixed(limits...))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				grant, _ := httpadmit.GrantFrom(r.Context())
				if len(grant.Leases) != leases {
					t.Errorf("%d leases, want %d", len(grant.Leases), leases)
					return
				}
				i := slices.IndexFunc(grant.Leases, func(l ratelimit.Lease) bool { return l.TTL == time.Second })
				if i < 0 {
					t.Errorf("leases %+v, want one with a TTL of 1s", grant.Leases)
					return
				}
				if n, err := e.limiter.ReleaseLeases(context.Background(), grant.Leases[i:i+1], "test_lost"); n != 1 || err != nil {
					t.Errorf("ReleaseLeases: %d, %v", n, err)
					return
				}
				deadline := time.Now().Add(10 * time.Second)
				if !e.obs.awaitFailedRenewal(t, deadline, 20*time.Millisecond) {
					return
				}
				for e.obs.heldLeases() != leases-1 { // told after the renewal's DatabaseCall
					if time.Now().After(deadline) {
						t.Errorf("LeasesHeld sums to %d once a lease was reported lost, want %d", e.obs.heldLeases(), leases-1)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				// The other lease's renewals succeed (two of them), or, with
				// no lease left, none is sent (for three ticks); the lost
				// lease is not reported again.
				okBefore, _ := renewals()
				if leases == 1 {
					time.Sleep(time.Second + 100*time.Millisecond)
				}
				for ok, _ := renewals(); leases > 1 && ok < okBefore+2; ok, _ = renewals() {
					if time.Now().After(deadline) {
						t.Errorf("no two renewals succeeded after the loss in 10s: %v", e.obs.callCounts())
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				ok, failed := renewals()
				if failed != 1 {
					t.Errorf("%d renewals failed, want 1 (the one that found the lease lost): %v", failed, e.obs.callCounts())
				}
				if leases == 1 && ok != okBefore {
					t.Errorf("%d renewals of no lease left: %v", ok-okBefore, e.obs.callCounts())
				}
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
			if got := e.obs.callCounts()["commit ok"]; got != 1 {
				t.Errorf("%d commits, want 1: %v", got, e.obs.callCounts())
			}
			if got := e.obs.heldLeases(); got != 0 {
				t.Errorf("LeasesHeld sums to %d after the settle, want 0", got)
			}
			e.nothingHeld()
		})
	}
}

// Leases are renewed every third of the shortest TTL among them. Once the
// lease with the shortest TTL is found lost, the others are renewed every
// third of the shortest TTL among them: they were renewed at the lost
// one's pace until the request ended, a round trip every 333 ms here
// where one every 2 s keeps them.
func TestRenewalsTakeThePaceOfTheLeasesLeftOnceOneIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	short := concurrent("model", uniqueKey("model"), 10)
	short.LeaseTTL = time.Second // renewed every 333 ms while it is held
	long := concurrent("key", uniqueKey("key"), 10)
	long.LeaseTTL = 6 * time.Second // every 2 s alone
	renewals := e.obs.renewals
	h := e.middleware(fixed(short, long))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		grant, _ := httpadmit.GrantFrom(r.Context())
		i := slices.IndexFunc(grant.Leases, func(l ratelimit.Lease) bool { return l.TTL == time.Second })
		if len(grant.Leases) != 2 || i < 0 {
			t.Errorf("leases %+v, want two, one of them with a TTL of 1s", grant.Leases)
			return
		}
		if n, err := e.limiter.ReleaseLeases(context.Background(), grant.Leases[i:i+1], "test_lost"); n != 1 || err != nil {
			t.Errorf("ReleaseLeases: %d, %v", n, err)
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		if !e.obs.awaitFailedRenewal(t, deadline, 5*time.Millisecond) {
			return
		}
		okBefore, _ := renewals()
		time.Sleep(1500 * time.Millisecond) // four ticks at the lost lease's pace, none at the other's
		if ok, failed := renewals(); ok > okBefore+1 || failed != 1 {
			t.Errorf("in 1.5 s after the loss %d renewals succeeded and %d failed in all, want at most 1 (every 2 s) and 1 (the one that found the lease lost): %v",
				ok-okBefore, failed, e.obs.callCounts())
		}
		for ok, _ := renewals(); ok < okBefore+1; ok, _ = renewals() { // the lease left is still renewed
			if time.Now().After(deadline) {
				t.Errorf("the lease left was not renewed in 10s: %v", e.obs.callCounts())
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	if got := e.obs.heldLeases(); got != 0 {
		t.Errorf("LeasesHeld sums to %d after the settle, want 0", got)
	}
	e.nothingHeld()
}

// renewals counts the lease renewals r was told of, by result.
func (r *recorder) renewals() (ok, failed int) {
	n := r.callCounts()
	return n["renew_leases ok"], n["renew_leases error"]
}

// awaitFailedRenewal waits, polling every poll, until a renewal told r it failed (a lost lease
// reported); false, with t failed (Errorf: it may run in a handler's goroutine), when none did by
// deadline.
func (r *recorder) awaitFailedRenewal(t *testing.T, deadline time.Time, poll time.Duration) bool {
	t.Helper()
	for _, failed := r.renewals(); failed == 0; _, failed = r.renewals() {
		if time.Now().After(deadline) {
			t.Errorf("no renewal reported the lost lease by the deadline: %v", r.callCounts())
			return false
		}
		time.Sleep(poll)
	}
	return true
}
