package httpadmit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// stoppedServer is the address of a port nothing listens on: connecting
// is refused at once. The port stays held until the test ends.
func stoppedServer(t *testing.T) string {
	t.Helper()
	s, err := deadserver.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr()
}

// hangingServer accepts connections and never answers, as a database
// whose host froze would.
func hangingServer(t *testing.T) string {
	t.Helper()
	h, err := deadserver.Hang()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h.Addr()
}

// brokenConnectTimeout is brokenEnv's connect_timeout, and
// brokenRequestBound the longest a request against its database may take.
// A request that fails as it should takes about the decision timeout (at
// most 250ms) plus the grace a statement gets once its caller left (100ms);
// one that waits for the connection attempt instead takes the connect
// timeout. The bound lies far from both, so that a stalled test machine
// does not reach it and a request that waits for the connection cannot
// stay under it.
const (
	brokenConnectTimeout = 20 * time.Second
	brokenRequestBound   = 5 * time.Second
)

// brokenEnv is an env whose limiter talks to addr, where no database
// answers.
func brokenEnv(t *testing.T, addr string) *env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=%d", addr, int(brokenConnectTimeout/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, pool: pool, limiter: ratelimit.New(pool), obs: &recorder{}, logs: &lockedBuffer{}}
}

// With the database stopped or hanging, each request gets its failure
// policy's answer within about the decision timeout: 503 when a limit
// fails closed, served unrecorded when all fail open.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	for name, addr := range map[string]func(*testing.T) string{"stopped": stoppedServer, "hanging": hangingServer} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := brokenEnv(t, addr(t))
			requests := window("api_key", "k", ratelimit.MetricRequests, 100, 1)
			tokens := window("api_key", "k", ratelimit.MetricTokens, 1000, 100)
			slot := concurrent("model", "m", 2)
			teamShadow := shadow(window("team", "t", ratelimit.MetricRequests, 10, 1))

			for _, tc := range []struct {
				policy   string
				limits   []httpadmit.Limit
				code     int
				outcomes map[string]int
			}{
				{"fail closed", []httpadmit.Limit{requests, tokens, slot, teamShadow}, 503,
					map[string]int{"failed_closed enforce requests": 1, "failed_closed enforce tokens": 1, "failed_closed enforce concurrent": 1}},
				{"one fails closed", []httpadmit.Limit{failOpen(requests), tokens, teamShadow}, 503,
					map[string]int{"failed_closed enforce tokens": 1}},
				{"fail open", []httpadmit.Limit{failOpen(requests), failOpen(tokens), failOpen(slot), teamShadow}, 200,
					map[string]int{"failed_open enforce requests": 1, "failed_open enforce tokens": 1, "failed_open enforce concurrent": 1,
						"failed_open shadow requests": 1}},
			} {
				e.obs = &recorder{}
				served := false
				h := e.middleware(fixed(tc.limits...), httpadmit.WithDecisionTimeout(httpadmit.DefaultDecisionTimeout))(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						served = true
						if err := httpadmit.ReportUsage(r.Context(), map[string]float64{"tokens": 7}); err != nil {
							t.Errorf("%s: ReportUsage: %v", tc.policy, err)
						}
						if g, ok := httpadmit.GrantFrom(r.Context()); !ok || !g.Empty() {
							t.Errorf("%s: GrantFrom = %+v, %v; want an empty grant", tc.policy, g, ok)
						}
					}))
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
				took := time.Since(start)
				t.Logf("%s, %s: %d in %s", name, tc.policy, rec.Code, took.Round(time.Millisecond))
				if rec.Code != tc.code || served != (tc.code == 200) {
					t.Errorf("%s: %d, handler ran %v; want %d", tc.policy, rec.Code, served, tc.code)
				}
				if took > brokenRequestBound {
					t.Errorf("%s: took %s with a decision timeout of %s and a connect timeout of %s", tc.policy, took, httpadmit.DefaultDecisionTimeout, brokenConnectTimeout)
				}
				if diff := cmp.Diff(tc.outcomes, e.obs.outcomes()); diff != "" {
					t.Errorf("%s: outcomes (-want +got):\n%s", tc.policy, diff)
				}
				if calls := e.obs.callCounts(); calls["reserve error"] != 1 || len(calls) != 1 {
					t.Errorf("%s: database calls %v, want one failed reserve", tc.policy, calls)
				}
				if tc.code == 200 && rec.Header().Get(httpadmit.HeaderRateLimit) != "" {
					t.Errorf("%s: rate-limit headers without a decision: %v", tc.policy, rec.Header())
				}
				if tc.code == 503 {
					var p httpadmit.Problem
					if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != 503 || rec.Header().Get("Retry-After") != "1" {
						t.Errorf("%s: 503 body %s (%v), Retry-After %q", tc.policy, rec.Body, err, rec.Header().Get("Retry-After"))
					}
				}
			}
		})
	}
}

// Under load, a hanging database costs every request about the decision
// timeout, never seconds: requests do not queue behind one another.
func TestHangingDatabaseUnderLoad(t *testing.T) {
	t.Parallel()
	e := brokenEnv(t, hangingServer(t))
	var gotMu sync.Mutex
	var got error
	h := e.middleware(fixed(window("api_key", "k", ratelimit.MetricRequests, 100, 1)),
		httpadmit.WithDecisionTimeout(20*time.Millisecond),
		httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			gotMu.Lock()
			got = err
			gotMu.Unlock()
			httpadmit.DefaultErrorHandler(w, r, err)
		}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("served") }))

	rec := httptest.NewRecorder()
	began := time.Now() // the first request logs the first line
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if took := time.Since(began); took > brokenRequestBound {
		t.Errorf("first request took %s with a decision timeout of 20ms and a connect timeout of %s", took, brokenConnectTimeout)
	}
	var unavailable *httpadmit.UnavailableError
	gotMu.Lock()
	first := got
	gotMu.Unlock()
	if !errors.As(first, &unavailable) || !errors.Is(first, httpadmit.ErrUnavailable) || !errors.Is(first, context.DeadlineExceeded) || len(unavailable.Limits) != 1 {
		t.Errorf("error handler got %v, want an *UnavailableError wrapping context.DeadlineExceeded", first)
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	const clients, each = 16, 5
	var mu sync.Mutex
	var worst time.Duration
	codes := map[int]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for range each {
				t0 := time.Now()
				resp, err := http.Post(srv.URL, "application/json", nil)
				took := time.Since(t0)
				mu.Lock()
				worst = max(worst, took)
				if err == nil {
					codes[resp.StatusCode]++
					resp.Body.Close()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests against a hanging database, decision timeout 20ms: %v in %s, slowest %s",
		clients*each, codes, time.Since(start).Round(time.Millisecond), worst.Round(time.Millisecond))
	if codes[503] != clients*each {
		t.Errorf("codes %v, want %d x 503", codes, clients*each)
	}
	if worst > brokenRequestBound {
		t.Errorf("slowest request took %s with a decision timeout of 20ms and a connect timeout of %s", worst, brokenConnectTimeout)
	}
	// One log line a second, not one per request, counted from the first
	// request's line: logged before the load began, it lets the next one
	// through a second later, which may be within the load's first second.
	if lines := strings.Count(e.logs.String(), "admission failed"); lines < 1 || lines > 1+int(time.Since(began)/time.Second) {
		t.Errorf("%d failure lines logged for %d failures in %s", lines, clients*each+1, time.Since(began))
	}
}

// A shadow limit set aside as invalid is not reported when the request
// fails open either (Observer.Decided lists only limits the decision
// reached): its scope type need not be a valid label value, and promadmit
// would panic on it, failing a request that its policy serves.
func TestFailOpenWithAnInvalidShadowLimit(t *testing.T) {
	t.Parallel()
	e := brokenEnv(t, stoppedServer(t))
	limits := fixed(
		failOpen(window("api_key", "k", ratelimit.MetricRequests, 100, 1)),
		shadow(window("team\xff", "t", ratelimit.MetricRequests, 10, 1)), // not valid UTF-8
	)
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
	rec := httptest.NewRecorder()
	e.middleware(limits)(next).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("%d, want 200 (fail open)", rec.Code)
	}
	if diff := cmp.Diff(map[string]int{"failed_open enforce requests": 1}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}

	metrics, err := promadmit.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("with promadmit's metrics, a request failing open panicked: %v", p)
			}
		}()
		rec := httptest.NewRecorder()
		e.middleware(limits, httpadmit.WithObserver(metrics))(next).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	}()
	if served != 2 {
		t.Errorf("served %d of 2", served)
	}
}
