package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local limit admitted from this process's block did not read its
// window. The headers tell no remaining amount for it (they used to tell
// what the block had left, which fell to 0 after 50 requests of a 10,000
// quota), a shadow limit on its counter is reported admitted, and both
// have Utilization 0; a limit decided in the database keeps its state.
func TestLocalLimitHeadersTellNoBlockState(t *testing.T) {
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	t.Cleanup(limiter.Close)
	obs := &recorder{}
	e := &env{t: t, pool: pool, limiter: limiter, obs: obs, logs: &lockedBuffer{}}
	key := uniqueKey("k")
	local := window("api_key", key, ratelimit.MetricRequests, 10000, 1)
	local.Local = true
	tried := window("api_key", key, ratelimit.MetricRequests, 5, 1) // a lower limit tried out on its counter
	tokens := window("api_key", key, ratelimit.MetricTokens, 1e6, 100)
	h := e.middleware(fixed(local, shadow(tried), tokens), httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	const n = 50
	for i := range n {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
		if v := rec.Header().Get("X-Ratelimit-Remaining-Requests"); v != "" {
			t.Fatalf("request %d: X-Ratelimit-Remaining-Requests %q, want none for a Local limit", i, v)
		}
		if v := rec.Header().Get("X-Ratelimit-Remaining-Tokens"); v == "" {
			t.Fatalf("request %d: no X-Ratelimit-Remaining-Tokens", i)
		}
		if p := rec.Header().Get(httpadmit.HeaderRateLimitPolicy); !strings.Contains(p, `"requests";q=10000`) {
			t.Fatalf("request %d: RateLimit-Policy %q, want the Local limit's policy", i, p)
		}
		if s := rec.Header().Get(httpadmit.HeaderRateLimit); strings.Contains(s, `"requests"`) {
			t.Fatalf("request %d: RateLimit %q tells the Local limit's state", i, s)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.decided) != n {
		t.Fatalf("%d decisions observed, want %d", len(obs.decided), n)
	}
	for _, o := range obs.decided[n-1] {
		if o.Outcome != httpadmit.OutcomeAdmitted {
			t.Errorf("%s: %v, want admitted", o.Limit.Metric, o.Outcome)
		}
		if local := o.Limit.Metric == ratelimit.MetricRequests; local != (o.Utilization == 0) {
			t.Errorf("%s (%v): utilization %g", o.Limit.Metric, o.Limit.Mode, o.Utilization)
		}
	}
}

// A request whose limits were all admitted from this process's blocks made
// no database call: its Reserve, and its Commit or Release, are settled in
// memory. The observer (pgadmit_db_operation_duration_seconds) is told only
// of the calls that reached the database; it used to be told of a reserve
// and a commit or release for every request, local or not, so that the
// operation rate and latency histogram counted in-memory admissions.
func TestLocalAdmissionsAreNotDatabaseCalls(t *testing.T) {
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	t.Cleanup(limiter.Close)
	for _, tc := range []struct {
		name  string
		mixed bool // a limit decided in the database besides the Local one
	}{{"local only", false}, {"local and remote", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{t: t, pool: pool, limiter: limiter, obs: &recorder{}, logs: &lockedBuffer{}}
			key := uniqueKey("k")
			local := window("api_key", key, ratelimit.MetricRequests, 100_000, 1)
			local.Local = true
			limits := []httpadmit.Limit{local}
			if tc.mixed {
				limits = append(limits, window("api_key", key, ratelimit.MetricTokens, 1e9, 10))
			}
			var remote, remoteDiscarded, served int
			h := e.middleware(fixed(limits...))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served++
				g, _ := httpadmit.GrantFrom(r.Context())
				inDB := len(g.Leases) > 0
				for _, res := range g.Reservations {
					inDB = inDB || !res.Local
				}
				discard := served%5 == 0
				if discard {
					_ = httpadmit.Discard(r.Context(), "upstream failed")
				}
				if inDB {
					remote++
					if discard {
						remoteDiscarded++
					}
				}
			}))
			const n = 50
			for i := range n {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
				if rec.Code != http.StatusOK {
					t.Fatalf("request %d: status %d %s", i, rec.Code, rec.Body)
				}
			}
			if !tc.mixed && remote == n {
				t.Fatalf("no request was admitted from a block: the test proves nothing")
			}
			if tc.mixed && remote != n {
				t.Fatalf("%d of %d requests reached the database, want all (their tokens limit is not Local)", remote, n)
			}
			want := map[string]int{}
			if remote > 0 {
				want["reserve ok"] = remote
			}
			if c := remote - remoteDiscarded; c > 0 {
				want["commit ok"] = c
			}
			if remoteDiscarded > 0 {
				want["release ok"] = remoteDiscarded
			}
			if diff := cmp.Diff(want, e.obs.callCounts()); diff != "" {
				t.Errorf("database calls of %d requests, %d decided in the database (-want +got):\n%s", n, remote, diff)
			}
		})
	}
}
