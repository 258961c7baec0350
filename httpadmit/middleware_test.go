package httpadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// An admitted request: the handler runs with the headers already set,
// reports its usage, and the request is committed with it.
func TestAdmitThenCommit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricRequests, 600, 1),
		window("api_key", key, ratelimit.MetricTokens, 100_000, 500),
		concurrent("model", key, 4),
	))
	var seen http.Header
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Clone()
		if got := e.liveLeases("model", key); got != 1 {
			t.Errorf("live leases while the handler runs = %d, want 1", got)
		}
		if err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
			t.Errorf("ReportUsage: %v", err)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))

	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("response %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if seen.Get(httpadmit.HeaderRateLimit) == "" {
		t.Errorf("the handler ran without the RateLimit header set: %v", seen)
	}
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 420}); got != want {
		t.Errorf("tokens counter = %+v, want %+v", got, want)
	}
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests counter = %+v, want %+v", got, want)
	}
	if got := e.liveLeases("model", key); got != 0 {
		t.Errorf("live leases after the request = %d, want 0", got)
	}
	if diff := cmp.Diff(map[string]int{
		"admitted enforce requests": 1, "admitted enforce tokens": 1, "admitted enforce concurrent": 1,
	}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"reserve ok": 1, "commit ok": 1}, e.obs.callCounts()); diff != "" {
		t.Errorf("database calls (-want +got):\n%s", diff)
	}
	if got := e.obs.heldLeases(); got != 0 {
		t.Errorf("leases held as observed = %d, want 0", got)
	}
	e.nothingHeld()
}

// The headers of an admitted request carry the decision's numbers.
func TestHeadersOfAnAdmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	limits := fixed(
		window("api_key", key, ratelimit.MetricRequests, 600, 1),
		window("api_key", key, ratelimit.MetricTokens, 100_000, 500),
		concurrent("model", key, 4),
	)
	h := e.middleware(limits, httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var rec *httptest.ResponseRecorder
	for range 2 {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	}
	window := int64(longWindow / time.Second)
	if diff := cmp.Diff([]sfItem{
		{"requests", map[string]any{"q": int64(600), "w": window}},
		{"tokens", map[string]any{"q": int64(100_000), "pgadmit-qu": "tokens", "w": window}},
		{"concurrent", map[string]any{"q": int64(4), "qu": "concurrent-requests"}},
	}, parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("RateLimit-Policy (-want +got):\n%s", diff)
	}
	got := parseList(t, rec.Header(), httpadmit.HeaderRateLimit)
	if len(got) != 3 {
		t.Fatalf("RateLimit %q: want 3 items", rec.Header().Get(httpadmit.HeaderRateLimit))
	}
	reset, _ := got[0].Params["t"].(int64)
	if reset < 1 || reset > window {
		t.Errorf("RateLimit t = %d, want 1..%d", reset, window)
	}
	if diff := cmp.Diff([]sfItem{
		{"requests", map[string]any{"r": int64(598), "t": reset}},
		{"tokens", map[string]any{"r": int64(99_000), "t": reset}},
		{"concurrent", map[string]any{"r": int64(3)}},
	}, got); diff != "" {
		t.Errorf("RateLimit (-want +got):\n%s", diff)
	}

	openAIReset, err := time.ParseDuration(rec.Header().Get("x-ratelimit-reset-tokens"))
	if err != nil || openAIReset <= 0 || openAIReset > longWindow {
		t.Errorf("x-ratelimit-reset-tokens = %q (%v)", rec.Header().Get("x-ratelimit-reset-tokens"), err)
	}
	anthropicReset, err := time.Parse(time.RFC3339, rec.Header().Get("anthropic-ratelimit-tokens-reset"))
	if err != nil || time.Until(anthropicReset) > longWindow+time.Minute {
		t.Errorf("anthropic-ratelimit-tokens-reset = %q (%v)", rec.Header().Get("anthropic-ratelimit-tokens-reset"), err)
	}
	want := map[string]string{
		"X-Ratelimit-Limit-Requests":             "600",
		"X-Ratelimit-Remaining-Requests":         "598",
		"X-Ratelimit-Limit-Tokens":               "100000",
		"X-Ratelimit-Remaining-Tokens":           "99000",
		"Anthropic-Ratelimit-Requests-Limit":     "600",
		"Anthropic-Ratelimit-Requests-Remaining": "598",
		"Anthropic-Ratelimit-Tokens-Limit":       "100000",
		"Anthropic-Ratelimit-Tokens-Remaining":   "99000",
	}
	for name, v := range want {
		if got := rec.Header().Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}

// A refused request gets 429, Retry-After from the database's clock, the
// headers and a problem body naming the limit; the handler never runs and
// nothing is written for it.
func TestRefusal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	limits := fixed(
		window("api_key", key, ratelimit.MetricRequests, 2, 1),
		window("api_key", key, ratelimit.MetricTokens, 1000, 100),
	)
	calls := 0
	h := e.middleware(limits)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
	var rec *httptest.ResponseRecorder
	for range 3 {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	}
	if rec.Code != http.StatusTooManyRequests || calls != 2 {
		t.Fatalf("third request: %d, handler ran %d times; want 429 and 2", rec.Code, calls)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	retryAfter, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || retryAfter < 1 || retryAfter > int(longWindow/time.Second) {
		t.Fatalf("Retry-After = %q", rec.Header().Get("Retry-After"))
	}
	if diff := cmp.Diff([]sfItem{{"requests", map[string]any{"r": int64(0), "t": int64(retryAfter)}}},
		parseList(t, rec.Header(), httpadmit.HeaderRateLimit)); diff != "" {
		t.Errorf("RateLimit of the refusal (-want +got):\n%s", diff)
	}
	if got := len(parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); got != 2 {
		t.Errorf("RateLimit-Policy of the refusal has %d policies, want 2", got)
	}
	if got := rec.Header().Get("x-ratelimit-remaining-requests"); got != "0" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want 0", got)
	}
	var p httpadmit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	quota, remaining, requested, retryable := 2.0, 0.0, 1.0, true
	want := httpadmit.Problem{
		Type: httpadmit.ProblemTypeQuotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded",
		Status: 429, ViolatedPolicies: []string{"requests"}, ScopeType: "api_key", Metric: "requests",
		Quota: &quota, WindowSeconds: int(longWindow / time.Second), Remaining: &remaining, Requested: &requested,
		Retryable: &retryable, RetryAfterSeconds: int64(retryAfter),
	}
	if diff := cmp.Diff(want, p, cmpIgnoreDetail); diff != "" {
		t.Errorf("problem (-want +got):\n%s", diff)
	}
	if strings.Contains(p.Detail, key) {
		t.Errorf("the problem's detail shows the scope key: %q", p.Detail)
	}
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 200}); got != want {
		t.Errorf("tokens after a refusal = %+v, want %+v (the refusal wrote nothing)", got, want)
	}
	if diff := cmp.Diff(map[string]int{
		"admitted enforce requests": 2, "admitted enforce tokens": 2, "refused enforce requests": 1,
	}, e.obs.outcomes()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	e.nothingHeld()
}

var cmpIgnoreDetail = cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Detail" }, cmp.Ignore())

// A request that can never fit is refused without Retry-After.
func TestRefusalThatRetryingCannotCure(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	all := httpadmit.WithHeaders(httpadmit.HeadersIETF | httpadmit.HeadersOpenAI | httpadmit.HeadersAnthropic)
	h := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 5000)), all)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("got %d with Retry-After %q; want 429 without", rec.Code, rec.Header().Get("Retry-After"))
	}
	var p httpadmit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Retryable == nil || *p.Retryable || p.RetryAfterSeconds != 0 {
		t.Errorf("problem %s (%v): want retryable false and no retry-after-seconds", rec.Body, err)
	}
	// Such a refusal does not tell when the window resets (on the
	// database's clock): the headers must not say it resets now.
	if got := parseList(t, rec.Header(), httpadmit.HeaderRateLimit); len(got) != 1 || got[0].Params["t"] != nil {
		t.Errorf("RateLimit %q: want the limit's state without t", rec.Header().Get(httpadmit.HeaderRateLimit))
	}
	if got := rec.Header().Get("x-ratelimit-reset-tokens"); got != "" {
		t.Errorf("x-ratelimit-reset-tokens %q: want none", got)
	}
	// Nor does the Anthropic family: its reset would send the client to
	// wait for a window that will not take the request either.
	if got := rec.Header().Get("anthropic-ratelimit-tokens-reset"); got != "" {
		t.Errorf("anthropic-ratelimit-tokens-reset %q: want none", got)
	}
	if got := rec.Header().Get("anthropic-ratelimit-tokens-limit"); got != "1000" {
		t.Errorf("anthropic-ratelimit-tokens-limit %q: want 1000 (the state is still shown)", got)
	}
}

// Bad requests (the LimitsFunc says so, or a limit is invalid in what the
// request sets) get 400, invalid configuration 500, and nothing is written; a request without limits passes untouched.
func TestBadRequestsAndNoLimits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	ran := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })
	for _, tc := range []struct {
		name   string
		limits httpadmit.LimitsFunc
		code   int
	}{
		{"no API key", func(*http.Request) ([]httpadmit.Limit, error) {
			return nil, errors.Join(httpadmit.ErrBadRequest, errors.New("no API key"))
		}, 400},
		{"negative estimate", fixed(window("api_key", key, ratelimit.MetricTokens, 1000, -5)), 400},
		{"one limit twice", fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 1),
			window("api_key", key, ratelimit.MetricTokens, 1000, 2)), 400},
		// Invalid with a zero amount: Reserve would refuse it too (it checks
		// every limit before skipping those that reserve nothing). It was
		// served, with q=-5 or the policy twice in the headers. A quota is
		// the configuration's, not the request's: a 500
		// (TestInvalidLimitIsBlamedOnWhatSetIt).
		{"negative quota, zero amount", fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 1),
			window("api_key", key, "cost", -5, 0)), 500},
		{"one limit twice, once with zero amount", fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 1),
			window("api_key", key, ratelimit.MetricTokens, 1000, 0)), 400},
		{"internal error", func(*http.Request) ([]httpadmit.Limit, error) { return nil, errors.New("plan lookup failed") }, 500},
	} {
		rec := httptest.NewRecorder()
		e.middleware(tc.limits)(next).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != tc.code || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q, want %d problem+json", tc.name, rec.Code, rec.Header().Get("Content-Type"), tc.code)
		}
		if tc.code == 500 && strings.Contains(rec.Body.String(), "plan lookup") {
			t.Errorf("%s: the 500 shows the error's text: %s", tc.name, rec.Body)
		}
		if strings.Contains(rec.Body.String(), key) {
			t.Errorf("%s: the body shows the scope key: %s", tc.name, rec.Body)
		}
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times for bad requests", ran)
	}
	if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
		t.Errorf("bad requests wrote %+v", got)
	}

	rec := httptest.NewRecorder()
	e.middleware(fixed())(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 200 || ran != 1 || len(rec.Header()) != 0 {
		t.Errorf("no limits: %d, handler ran %d times, headers %v; want 200, once, none", rec.Code, ran, rec.Header())
	}
	if got := e.obs.callCounts(); len(got) != 0 {
		t.Errorf("database calls without limits or for bad ones: %v", got)
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	limiter := ratelimit.New(nil)
	for name, tc := range map[string]struct {
		field string
		build func() (func(http.Handler) http.Handler, error)
	}{
		"nil limiter": {"limiter", func() (func(http.Handler) http.Handler, error) { return httpadmit.New(nil, fixed()) }},
		// Not made with ratelimit.New: it would fail every request.
		"zero limiter": {"limiter", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(&ratelimit.Limiter{}, fixed())
		}},
		"nil LimitsFunc": {"limits", func() (func(http.Handler) http.Handler, error) { return httpadmit.New(limiter, nil) }},
		"zero timeout": {"WithDecisionTimeout", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithDecisionTimeout(0))
		}},
		"negative timeout": {"WithDecisionTimeout", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithDecisionTimeout(-time.Second))
		}},
		"negative settle": {"WithSettleTimeout", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithSettleTimeout(-1))
		}},
		"unknown headers": {"WithHeaders", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithHeaders(0x80))
		}},
		"nil observer": {"WithObserver", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithObserver(nil))
		}},
		"nil error handler": {"WithErrorHandler", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithErrorHandler(nil))
		}},
		"nil refusal handler": {"WithRefusalHandler", func() (func(http.Handler) http.Handler, error) {
			return httpadmit.New(limiter, fixed(), httpadmit.WithRefusalHandler(nil))
		}},
	} {
		mw, err := tc.build()
		// A typed error, as bad input is everywhere else: the caller can
		// tell a configuration mistake from other failures.
		var invalid *ratelimit.ValidationError
		if mw != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != tc.field {
			t.Errorf("%s: New = %v, want a *ratelimit.ValidationError on %s", name, err, tc.field)
		}
	}
}

// ReportUsage and Discard outside the middleware, and bad usage.
func TestReportUsageErrors(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if err := httpadmit.ReportUsage(r.Context(), map[string]float64{"tokens": 1}); !errors.Is(err, httpadmit.ErrNoAdmission) {
		t.Errorf("ReportUsage outside the middleware: %v", err)
	}
	if err := httpadmit.Discard(r.Context(), "x"); !errors.Is(err, httpadmit.ErrNoAdmission) {
		t.Errorf("Discard outside the middleware: %v", err)
	}
	if _, ok := httpadmit.GrantFrom(r.Context()); ok {
		t.Errorf("GrantFrom outside the middleware: ok")
	}

	e := setup(t)
	key := uniqueKey("key")
	h := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 100)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, bad := range []map[string]float64{{"tokens": -1}, {"tokens": nan()}, {"": 3}, {"tokens": 2e15}} {
				err := httpadmit.ReportUsage(r.Context(), bad)
				if !errors.Is(err, ratelimit.ErrInvalidInput) {
					t.Errorf("ReportUsage(%v) = %v, want ErrInvalidInput", bad, err)
				}
				// httpadmit's error, naming one package: it read `ratelimit: invalid usage["tokens"] ...`.
				if msg := fmt.Sprint(err); !strings.HasPrefix(msg, `httpadmit: ReportUsage: invalid usage[`) || strings.Contains(msg, "ratelimit") {
					t.Errorf("ReportUsage(%v) = %q, want it to start \"httpadmit: ReportUsage: invalid usage[\" and name no other package", bad, msg)
				}
				for metric := range bad {
					if invalid := (*ratelimit.ValidationError)(nil); !errors.As(err, &invalid) || invalid.Field != fmt.Sprintf("usage[%q]", metric) {
						t.Errorf("ReportUsage(%v) = %v, want a *ValidationError on usage[%q]", bad, err, metric)
					}
				}
			}
			if g, ok := httpadmit.GrantFrom(r.Context()); !ok || len(g.Reservations) != 1 {
				t.Errorf("GrantFrom = %+v, %v", g, ok)
			}
		}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	// Nothing valid was reported: committed at the estimate.
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 100}); got != want {
		t.Errorf("tokens = %+v, want %+v", got, want)
	}
}
