package httpadmit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind two middlewares (one for every route, one for a route's own
// limits), the headers show the limits of both, named apart, and the
// OpenAI headers the one with the least left: the inner one's headers used
// to replace the outer one's, so that a client saw only the route's limits
// (and RateLimit-Policy and RateLimit could speak of different limits).
// A refusal inside names its limit in the problem body as in the headers.
func TestNestedMiddlewaresShowTheLimitsOfBoth(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, model := uniqueKey("key"), uniqueKey("model")
	outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 10, 1)))
	inner := e.middleware(fixed(window("model", model, ratelimit.MetricRequests, 2, 1)))
	h := outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		return rec
	}
	w := int64(longWindow / time.Second)
	wantPolicy := []sfItem{
		{"api_key-requests", map[string]any{"q": int64(10), "w": w}},
		{"model-requests", map[string]any{"q": int64(2), "w": w}},
	}
	withoutT := func(items []sfItem) []sfItem {
		for _, it := range items {
			delete(it.Params, "t")
		}
		return items
	}

	rec := serve()
	if rec.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", rec.Code, rec.Body)
	}
	if diff := cmp.Diff(wantPolicy, parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("RateLimit-Policy behind two middlewares (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sfItem{
		{"api_key-requests", map[string]any{"r": int64(9)}},
		{"model-requests", map[string]any{"r": int64(1)}},
	}, withoutT(parseList(t, rec.Header(), httpadmit.HeaderRateLimit))); diff != "" {
		t.Errorf("RateLimit behind two middlewares (-want +got):\n%s", diff)
	}
	if got := rec.Header().Get("x-ratelimit-remaining-requests"); got != "1" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want 1 (the inner limit has the least left)", got)
	}

	// The inner limit is full after a second request, and refuses the third.
	serve()
	rec = serve()
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %s; want 429", rec.Code, rec.Body)
	}
	if diff := cmp.Diff(wantPolicy, parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("RateLimit-Policy of a refusal inside (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sfItem{
		{"api_key-requests", map[string]any{"r": int64(7)}},
		{"model-requests", map[string]any{"r": int64(0)}},
	}, withoutT(parseList(t, rec.Header(), httpadmit.HeaderRateLimit))); diff != "" {
		t.Errorf("RateLimit of a refusal inside (-want +got):\n%s", diff)
	}
	var p httpadmit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if diff := cmp.Diff([]string{"model-requests"}, p.ViolatedPolicies); diff != "" {
		t.Errorf("violated-policies, as named in RateLimit-Policy (-want +got):\n%s", diff)
	}
	e.nothingHeld()
}

// The outer middleware has the binding limit: the OpenAI headers show it,
// not the inner one's, which has more left.
func TestNestedMiddlewaresShowTheOuterBindingLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, model := uniqueKey("key"), uniqueKey("model")
	outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 3, 1)))
	inner := e.middleware(fixed(window("model", model, ratelimit.MetricRequests, 100, 1)))
	rec := httptest.NewRecorder()
	outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))).
		ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got, want := rec.Header().Get("x-ratelimit-limit-requests")+" "+rec.Header().Get("x-ratelimit-remaining-requests"), "3 2"; got != want {
		t.Errorf("x-ratelimit-limit/remaining-requests = %q, want %q (the outer limit has the least left)", got, want)
	}
	e.nothingHeld()
}

// An outer middleware that sends no headers (WithHeaders(0): its limits
// are not for clients to see) shows none through the one inside either:
// that one shows its own limits alone, named as if it were the only one.
func TestNestedMiddlewaresShowNoLimitsOfOneThatSendsNoHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, model := uniqueKey("key"), uniqueKey("model")
	outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 3, 1)), httpadmit.WithHeaders(0))
	inner := e.middleware(fixed(window("model", model, ratelimit.MetricRequests, 100, 1)))
	rec := httptest.NewRecorder()
	outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))).
		ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	w := int64(longWindow / time.Second)
	if diff := cmp.Diff([]sfItem{{"requests", map[string]any{"q": int64(100), "w": w}}},
		parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("RateLimit-Policy (-want +got):\n%s", diff)
	}
	if got, want := rec.Header().Get("x-ratelimit-limit-requests")+" "+rec.Header().Get("x-ratelimit-remaining-requests"), "100 99"; got != want {
		t.Errorf("x-ratelimit-limit/remaining-requests = %q, want %q (the inner limit's)", got, want)
	}
	e.nothingHeld()
}
