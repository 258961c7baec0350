package httpadmit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A counter that both nested middlewares limit, the inner one with a zero
// Amount (it reserves nothing, so its decision tells no state), is shown
// with the state the outer one read, against the inner one's quota. It was
// shown with no state: the x-ratelimit-*-tokens then showed another tokens
// limit, with far more left than the counter the outer one had nearly
// filled allows (99010 where 10 were left), and RateLimit lost its item.
func TestNestedCounterTheInnerOneDidNotReadShowsTheOuterState(t *testing.T) {
	t.Parallel()
	e := setup(t)
	perKey := window("api_key", "", ratelimit.MetricTokens, 1000, 990)
	unread := perKey
	unread.Amount = 0
	lower := unread
	lower.Limit.Limit = 995 // a lower quota on the same counter, inside
	for _, tc := range []struct {
		name      string
		inner     httpadmit.Limit
		quota     int64
		remaining int64
	}{
		{"same quota", unread, 1000, 10},
		{"lower quota", lower, 995, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey("key")
			outerKey, innerKey := perKey, tc.inner
			outerKey.Scope.Key, innerKey.Scope.Key = key, key
			perOrg := window("org", uniqueKey("org"), ratelimit.MetricTokens, 100000, 990)
			outer := e.middleware(fixed(outerKey, perOrg))
			inner := e.middleware(fixed(innerKey))
			rec := httptest.NewRecorder()
			outer(inner(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))).
				ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			got := parseList(t, rec.Header(), httpadmit.HeaderRateLimit)
			for _, it := range got {
				if _, ok := it.Params["t"]; !ok {
					t.Errorf("RateLimit item %q has no t", it.Name)
				}
				delete(it.Params, "t")
			}
			if diff := cmp.Diff([]sfItem{
				{"org-tokens", map[string]any{"r": int64(99010)}},
				{"api_key-tokens", map[string]any{"r": tc.remaining}},
			}, got); diff != "" {
				t.Errorf("RateLimit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]sfItem{
				{"org-tokens", map[string]any{"q": int64(100000), "pgadmit-qu": "tokens", "w": int64(longWindow / time.Second)}},
				{"api_key-tokens", map[string]any{"q": tc.quota, "pgadmit-qu": "tokens", "w": int64(longWindow / time.Second)}},
			}, parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy)); diff != "" {
				t.Errorf("RateLimit-Policy (-want +got):\n%s", diff)
			}
			if got, want := rec.Header().Get("x-ratelimit-limit-tokens")+" "+rec.Header().Get("x-ratelimit-remaining-tokens"),
				fmt.Sprint(tc.quota, " ", tc.remaining); got != want {
				t.Errorf("x-ratelimit-limit/remaining-tokens = %q, want %q (the counter the outer one nearly filled)", got, want)
			}
			if rec.Header().Get("x-ratelimit-reset-tokens") == "" {
				t.Errorf("no x-ratelimit-reset-tokens")
			}
		})
	}
	e.nothingHeld()
}

// A middleware behind another deletes the headers that one set before
// setting its own (clearHeaders): here the inner limit, on the counter the
// outer one limits, has a quota that is not a whole number, which the IETF
// headers cannot carry. The outer one's RateLimit-Policy and RateLimit,
// which would state a quota of 1000 the inner limit does not allow, are
// gone; the OpenAI headers show the inner quota.
func TestNestedMiddlewareClearsTheOuterHeadersItHasNoValueFor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	outerLimit := window("api_key", key, ratelimit.MetricTokens, 1000, 10)
	innerLimit := outerLimit
	innerLimit.Limit.Limit, innerLimit.Amount = 999.5, 0
	outer := e.middleware(fixed(outerLimit))
	inner := e.middleware(fixed(innerLimit))
	rec := httptest.NewRecorder()
	outer(inner(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))).
		ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	for _, name := range []string{httpadmit.HeaderRateLimitPolicy, httpadmit.HeaderRateLimit} {
		if got := rec.Header().Values(name); len(got) > 0 {
			t.Errorf("%s = %q, want none", name, got)
		}
	}
	if got := rec.Header().Get("x-ratelimit-limit-tokens") + " " + rec.Header().Get("x-ratelimit-remaining-tokens"); got != "999 989" {
		t.Errorf("x-ratelimit-limit/remaining-tokens = %q, want 999 989", got)
	}
	e.nothingHeld()
}
