package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// serveOnce serves one request through h, which must admit it.
func serveOnce(t *testing.T, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	return rec
}

// A middleware inside another, whose limit on the outer one's counter
// reserves nothing (a zero Amount), shows that counter against its own
// quota from what the outer decision told, subtracted exactly: a tokens
// limit of 2.3 on a counter holding 0.3 has 2 left, which float64's
// 2.3 - (0.5 - 0.2) (1.9999999999999998) showed as 1.
func TestNestedHeadersSubtractExactly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 0.5, 0.3)))
	inner := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 2.3, 0)),
		httpadmit.WithHeaders(httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic))
	rec := serveOnce(t, outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	if got := [2]string{rec.Header().Get("x-ratelimit-remaining-tokens"), rec.Header().Get("anthropic-ratelimit-tokens-remaining")}; got != [2]string{"2", "2"} {
		t.Errorf("remaining headers %q, want 2 and 2 (2.3 less the 0.3 held)", got)
	}
	e.nothingHeld()
}

// An enforced limit with a zero Amount is shown from the reservation of
// the shadow limit on its counter, subtracted exactly as well.
func TestZeroAmountHeadersSubtractExactly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 2.3, 0),
		shadow(window("api_key", key, ratelimit.MetricTokens, 0.5, 0.3)),
	))
	rec := serveOnce(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	if got := rec.Header().Get("x-ratelimit-remaining-tokens"); got != "2" {
		t.Errorf("x-ratelimit-remaining-tokens = %q, want 2 (2.3 less the 0.3 held)", got)
	}
	e.nothingHeld()
}
