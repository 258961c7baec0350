package httpadmit_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The timeouts at the ends of what New takes, on a request that is
// reserved, renews its lease and is committed (what New refuses,
// TestOptionsKeepTheirDocumentedBounds holds). The largest duration neither overflows nor ends a
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

// WithHeaders sends the families it names, on an admitted response and on
// a refusal alike: "(default DefaultHeaders); 0 sends none", and
// "Retry-After is not one of them ...: it is set on a refusal that
// retrying can cure whatever f, 0 included".
func TestWithHeadersSendsTheFamiliesItNames(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ietf := []string{"Ratelimit", "Ratelimit-Policy"}
	openAI := []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	anthropic := []string{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"}
	every := slices.Concat(ietf, openAI, anthropic)
	for _, c := range []struct {
		name string
		opts []httpadmit.Option
		want []string
	}{
		{"none given", nil, slices.Concat(ietf, openAI)},
		{"WithHeaders(0)", []httpadmit.Option{httpadmit.WithHeaders(0)}, nil},
		{"WithHeaders(IETF)", []httpadmit.Option{httpadmit.WithHeaders(httpadmit.HeadersIETF)}, ietf},
		{"WithHeaders(OpenAI)", []httpadmit.Option{httpadmit.WithHeaders(httpadmit.HeadersOpenAI)}, openAI},
		{"WithHeaders(Anthropic)", []httpadmit.Option{httpadmit.WithHeaders(httpadmit.HeadersAnthropic)}, anthropic},
		{"WithHeaders(all)", []httpadmit.Option{httpadmit.WithHeaders(httpadmit.HeadersIETF | httpadmit.HeadersOpenAI | httpadmit.HeadersAnthropic)}, every},
	} {
		h := e.middleware(fixed(window("api_key", uniqueKey("families"), ratelimit.MetricRequests, 1, 1)), c.opts...)(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for _, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != want {
				t.Fatalf("%s: status %d, want %d", c.name, rec.Code, want)
			}
			var got []string
			for _, field := range every {
				if len(rec.Header().Values(field)) > 0 {
					got = append(got, field)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s, %d: fields %v, want %v", c.name, want, got, c.want)
			}
			if want == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
				t.Errorf("%s: a refusal without Retry-After", c.name)
			}
		}
	}
	e.nothingHeld()
}
