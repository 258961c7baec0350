package httpadmit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A shadow limit on a counter of its own (a new per-team limit) is
// reserved with the enforced ones; once full it would refuse, which is
// counted and logged (one line a second), and the request is served. Its counter holds exactly
// what an enforced limit would have admitted.
func TestShadowLimitOnItsOwnCounter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, team := uniqueKey("key"), uniqueKey("team")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricRequests, 100, 1),
		shadow(window("team", team, ratelimit.MetricRequests, 2, 1)),
	))
	served := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	var rec *httptest.ResponseRecorder
	start := time.Now()
	for range 5 {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("a shadow limit refused: %d %s", rec.Code, rec.Body)
		}
	}
	elapsed := time.Since(start)
	if served != 5 {
		t.Errorf("served %d of 5", served)
	}
	if got, want := e.books("team", team, ratelimit.MetricRequests), (book{Used: 2}); got != want {
		t.Errorf("shadow counter = %+v, want %+v (what enforcing it would have admitted)", got, want)
	}
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 5}); got != want {
		t.Errorf("enforced counter = %+v, want %+v", got, want)
	}
	if diff := cmp.Diff(map[string]int{
		"admitted enforce requests": 5, "admitted shadow requests": 2, "shadow_refused shadow requests": 3,
	}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	// One round trip per request, plus one for each request the shadow
	// limit would have refused.
	if diff := cmp.Diff(map[string]int{"reserve ok": 5, "reserve exceeded": 3, "commit ok": 5}, e.obs.callCounts()); diff != "" {
		t.Errorf("database calls (-want +got):\n%s", diff)
	}
	// One line a second per shadow limit (TestShadowRefusalsLogOneLineASecondPerLimit).
	if got := strings.Count(e.logs.String(), "shadow limit would refuse"); got < 1 || got > 3 || elapsed < time.Second && got != 1 {
		t.Errorf("%d shadow refusals logged in %s, want 1 (one a second):\n%s", got, elapsed, e.logs)
	}
	if !strings.Contains(e.logs.String(), team) {
		t.Errorf("the log does not name the shadow limit's scope:\n%s", e.logs)
	}
	// Clients never see shadow limits.
	if got := rec.Header().Get(httpadmit.HeaderRateLimitPolicy); got != `"requests";q=100;w=31622400` {
		t.Errorf("RateLimit-Policy = %q: only the enforced limit belongs there", got)
	}
	e.nothingHeld()
}

// A shadow limit that ratelimit would refuse as input (a NaN amount, a
// negative limit, no scope key) is set aside and logged, at most once a
// second: shadow limits never refuse, so a bad one fails no request.
func TestInvalidShadowLimitsAreSetAside(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 1000, 10),
		shadow(window("api_key", key, ratelimit.MetricTokens, 500, nan())),       // on the enforced counter
		shadow(window("team", uniqueKey("team"), ratelimit.MetricTokens, -1, 1)), // on a counter of its own
		shadow(window("team", "", ratelimit.MetricRequests, 10, 1)),
	))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("a request with invalid shadow limits: %d %s, want 200", rec.Code, rec.Body)
		}
	}
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 30}); got != want {
		t.Errorf("enforced counter = %+v, want %+v", got, want)
	}
	if diff := cmp.Diff(map[string]int{"admitted enforce tokens": 3}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if got := strings.Count(e.logs.String(), "invalid shadow limit set aside"); got != 1 {
		t.Errorf("%d lines about invalid shadow limits, want 1 (one a second):\n%s", got, e.logs)
	}
	e.nothingHeld()
}

// A shadow limit on an enforced limit's own counter (a lower limit being
// tried out) is judged from the enforced decision, with no round trip of
// its own.
func TestShadowLimitOnAnEnforcedCounter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 1000, 100),
		shadow(window("api_key", key, ratelimit.MetricTokens, 250, 100)),
	))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 4 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	if diff := cmp.Diff(map[string]int{
		"admitted enforce tokens": 4, "admitted shadow tokens": 2, "shadow_refused shadow tokens": 2,
	}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"reserve ok": 4, "commit ok": 4}, e.obs.callCounts()); diff != "" {
		t.Errorf("database calls (-want +got):\n%s", diff)
	}
	e.obs.mu.Lock()
	last := e.obs.decided[len(e.obs.decided)-1]
	e.obs.mu.Unlock()
	if got := last[1].Utilization; got != 400.0/250 {
		t.Errorf("utilization of the shadow limit on the 4th request = %g, want %g", got, 400.0/250)
	}
	e.nothingHeld()
}

// An enforced refusal ends the decision: shadow limits are not reached,
// and the 429 is the enforced limit's.
func TestShadowLimitsOfARefusedRequest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, team := uniqueKey("key"), uniqueKey("team")
	mw := e.middleware(fixed(
		shadow(window("team", team, ratelimit.MetricRequests, 1, 1)),
		window("api_key", key, ratelimit.MetricRequests, 1, 1),
	))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	codes := []int{}
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		codes = append(codes, rec.Code)
	}
	if diff := cmp.Diff([]int{200, 429}, codes); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{
		"admitted enforce requests": 1, "admitted shadow requests": 1, "refused enforce requests": 1,
	}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	e.nothingHeld()
}

// Two shadow limits on one counter that no enforced limit draws on (two
// candidate limits tried side by side) cannot both be reserved: Reserve
// refuses the pair as input. Shadow limits never refuse, so the second is
// set aside and logged, and the request is served on the others, not
// answered 400.
func TestShadowLimitsOnOneCounter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, team := uniqueKey("key"), uniqueKey("team")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricRequests, 100, 1),
		shadow(window("team", team, ratelimit.MetricRequests, 10, 1)),
		shadow(window("team", team, ratelimit.MetricRequests, 5, 1)),
	))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("two shadow limits on one counter: %d %s, want 200", rec.Code, rec.Body)
		}
	}
	if got, want := e.books("team", team, ratelimit.MetricRequests), (book{Used: 2}); got != want {
		t.Errorf("shadow counter = %+v, want %+v", got, want)
	}
	if diff := cmp.Diff(map[string]int{"admitted enforce requests": 2, "admitted shadow requests": 2}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if got := strings.Count(e.logs.String(), "invalid shadow limit set aside"); got != 1 {
		t.Errorf("%d lines about shadow limits set aside, want 1:\n%s", got, e.logs)
	}
	e.nothingHeld()
}

// A request whose only limit is a shadow limit that would refuse it has
// nothing left to reserve once it is dropped: one database call, not a
// second "reserve" that never reached the database.
func TestOnlyAShadowLimitThatWouldRefuse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	team := uniqueKey("team")
	h := e.middleware(fixed(shadow(window("team", team, ratelimit.MetricRequests, 0, 1))))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if diff := cmp.Diff(map[string]int{"reserve exceeded": 1}, e.obs.callCounts()); diff != "" {
		t.Errorf("database calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"shadow_refused shadow requests": 1}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	e.nothingHeld()
}

// Shadow limits past what one Reserve takes (ratelimit.MaxLimitsPerCall,
// enforced limits first) are set aside and logged, not a 400 for every
// request; the ones within it are reserved as usual.
func TestShadowLimitsPastTheMaximumAreSetAside(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, team := uniqueKey("key"), uniqueKey("team")
	limits := []httpadmit.Limit{window("api_key", key, ratelimit.MetricRequests, 100, 1)}
	for i := range ratelimit.MaxLimitsPerCall + 5 {
		limits = append(limits, shadow(window("team", fmt.Sprintf("%s-%d", team, i), ratelimit.MetricRequests, 100, 1)))
	}
	h := e.middleware(fixed(limits...))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("a request with %d shadow limits: %d %s, want 200", len(limits)-1, rec.Code, rec.Body)
	}
	last := ratelimit.MaxLimitsPerCall - 2 // the last shadow limit within the maximum
	if got, want := e.books("team", fmt.Sprintf("%s-%d", team, last), ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("the last shadow counter within the maximum = %+v, want %+v", got, want)
	}
	if got := e.books("team", fmt.Sprintf("%s-%d", team, last+1), ratelimit.MetricRequests); got != (book{}) {
		t.Errorf("the first shadow counter past the maximum = %+v, want nothing", got)
	}
	if got := strings.Count(e.logs.String(), "invalid shadow limit set aside"); got != 1 {
		t.Errorf("%d lines about shadow limits set aside, want 1 (one a second):\n%s", got, e.logs)
	}
	e.nothingHeld()
}

// closingObserver records, and closes pool once it is told of a Reserve
// the database refused: the next Reserve fails, as on a database lost
// between the two round trips of a shadow refusal.
type closingObserver struct {
	*recorder
	pool *pgxpool.Pool
}

func (o closingObserver) DatabaseCall(op string, took time.Duration, err error) {
	o.recorder.DatabaseCall(op, took, err)
	if op == httpadmit.OpReserve && isExceeded(err) {
		o.pool.Close()
	}
}

// A shadow limit that would refuse the request has been decided, and
// logged, when the database fails on the Reserve that follows without it:
// its outcome is still counted, as shadow_refused, beside the failure
// policy's outcomes of the other limits. It was dropped, or counted
// failed_open, which the log line contradicted.
func TestShadowRefusalThenDatabaseFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		enforced func(httpadmit.Limit) httpadmit.Limit
		code     int
		outcome  string
	}{
		{"fail closed", func(l httpadmit.Limit) httpadmit.Limit { return l }, http.StatusServiceUnavailable, "failed_closed enforce requests"},
		{"fail open", failOpen, http.StatusOK, "failed_open enforce requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pools := pgtest.NewPools(t, 2) // the second, the limiter's, is closed mid-request
			e := &env{t: t, pool: pools[0], limiter: ratelimit.New(pools[1]), obs: &recorder{}, logs: &lockedBuffer{}}
			key, team := uniqueKey("key"), uniqueKey("team")
			h := e.middleware(fixed(
				tc.enforced(window("api_key", key, ratelimit.MetricRequests, 100, 1)),
				shadow(window("team", team, ratelimit.MetricRequests, 0, 1)), // would refuse every request
			), httpadmit.WithObserver(closingObserver{recorder: e.obs, pool: pools[1]}))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
			if rec.Code != tc.code {
				t.Fatalf("%d %s; want %d", rec.Code, rec.Body, tc.code)
			}
			if diff := cmp.Diff(map[string]int{"reserve exceeded": 1, "reserve error": 1}, e.obs.callCounts()); diff != "" {
				t.Fatalf("database calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int{"shadow_refused shadow requests": 1, tc.outcome: 1}, e.obs.outcomes()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if got := strings.Count(e.logs.String(), "shadow limit would refuse"); got != 1 {
				t.Errorf("%d shadow refusals logged, want 1:\n%s", got, e.logs)
			}
			e.nothingHeld()
		})
	}
}
