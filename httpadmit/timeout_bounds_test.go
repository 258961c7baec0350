package httpadmit_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The timeouts at the ends of what New takes (TestOptionsKeepTheirDocumentedBounds
// holds what it refuses), on a request that is reserved, renews its lease
// and is committed. The largest duration neither overflows nor ends a
// call early: the request is admitted, its lease renewed and its usage
// committed. The smallest, 1ns, ends every decision at once: "past it, the
// failure policy of its limits applies", a 503 with an *UnavailableError
// holding context.DeadlineExceeded when a limit fails closed, the request
// served unrecorded when all fail open; and nothing stays held.
func TestTimeoutsAtTheirBounds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("bounds")
	requests := window("api_key", key, ratelimit.MetricRequests, 10, 1)
	lease := concurrent("api_key", key, 2)
	lease.LeaseTTL = time.Second // renewed after a third of it
	const maxDur = time.Duration(math.MaxInt64)

	h := e.middleware(fixed(requests, lease), httpadmit.WithDecisionTimeout(maxDur), httpadmit.WithSettleTimeout(maxDur))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(800 * time.Millisecond) // past a renewal
			if err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricRequests: 1}); err != nil {
				t.Errorf("ReportUsage: %v", err)
			}
		}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("MaxInt64 timeouts: status %d, want 200", rec.Code)
	}
	if b := e.books("api_key", key, ratelimit.MetricRequests); b != (book{Used: 1}) {
		t.Errorf("MaxInt64 timeouts: books %+v, want used 1", b)
	}
	calls := e.obs.callCounts()
	if calls["reserve ok"] != 1 || calls["renew_leases ok"] < 1 || calls["commit ok"] != 1 || len(calls) != 3 {
		t.Errorf("MaxInt64 timeouts: database calls %v, want a reserve, a renewal or more and a commit, each ok", calls)
	}

	for _, policy := range []httpadmit.FailurePolicy{httpadmit.FailClosed, httpadmit.FailOpen} {
		l := requests
		l.OnFailure = policy
		var got error
		ran := false
		h := e.middleware(fixed(l), httpadmit.WithDecisionTimeout(time.Nanosecond), httpadmit.WithErrorHandler(
			func(w http.ResponseWriter, r *http.Request, err error) {
				got = err
				httpadmit.DefaultErrorHandler(w, r, err)
			}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		switch policy {
		case httpadmit.FailClosed:
			var unavailable *httpadmit.UnavailableError
			if rec.Code != http.StatusServiceUnavailable || ran || !errors.As(got, &unavailable) || !errors.Is(got, context.DeadlineExceeded) {
				t.Errorf("1ns, %v: status %d, handler ran %v, error %v; want 503 and an *UnavailableError of a deadline", policy, rec.Code, ran, got)
			}
		case httpadmit.FailOpen:
			if rec.Code != http.StatusOK || !ran || got != nil {
				t.Errorf("1ns, %v: status %d, handler ran %v, error %v; want it served", policy, rec.Code, ran, got)
			}
		}
	}
	if b := e.books("api_key", key, ratelimit.MetricRequests); b != (book{Used: 1}) {
		t.Errorf("after the 1ns decisions: books %+v, want used 1 still", b)
	}
	e.nothingHeld()
}
