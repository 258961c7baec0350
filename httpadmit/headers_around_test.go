package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// One middleware sets the headers it has values for and leaves the others
// alone, as it always did: a header set around it (by another rate limiter
// of the gateway, here on tokens) is not its to delete. Only behind
// another httpadmit middleware does it delete what that one set and it
// has no value for.
func TestOneMiddlewareLeavesTheHeadersItHasNoValueFor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 10, 1)),
		httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic))
	around := map[string]string{
		"x-ratelimit-limit-tokens":             "77",
		"anthropic-ratelimit-tokens-limit":     "77",
		"x-ratelimit-remaining-tokens":         "7",
		"anthropic-ratelimit-tokens-remaining": "7",
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range around {
			w.Header().Set(k, v)
		}
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	for k, v := range around {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q as set around the middleware", k, got, v)
		}
	}
	if got := rec.Header().Get("x-ratelimit-remaining-requests"); got != "9" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want 9", got)
	}
	e.nothingHeld()
}
