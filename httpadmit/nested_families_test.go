package httpadmit_test

import (
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

// Behind two middlewares (one for every route, one for a route's own
// limits), every header family on the response shows the limits of both,
// whichever of them sends it: the OpenAI and Anthropic headers the one
// with the least left, here the inner one's. A middleware with
// WithHeaders(0) keeps its limits out of them, and one that failed open
// has none to show: it sends no headers, so that its families are not
// sent unless another one sends them. A family that only the outer
// middleware sent used to show its limits alone, so that a request the
// inner one refused got a 429 whose x-ratelimit-remaining-requests and
// RateLimit said there was quota left.
func TestNestedMiddlewaresShowAllLimitsInEveryFamily(t *testing.T) {
	t.Parallel()
	const ietf, openAI, anthropic = httpadmit.HeadersIETF, httpadmit.HeadersOpenAI, httpadmit.HeadersAnthropic
	// The outer limit allows 10 requests, the inner one 2: the third
	// request is refused by the inner one.
	const outerQuota, innerQuota = 10, 2
	for _, c := range []struct {
		name         string
		outer, inner httpadmit.HeaderFamily
		// between puts a middleware with WithHeaders(0), and a limit of
		// its own, between them; outerFails and innerFails give that
		// middleware a database that is down, and a limit that fails open.
		between, outerFails, innerFails bool
		// The families on the response, and the limits they show.
		sent                   httpadmit.HeaderFamily
		showsOuter, showsInner bool
	}{
		{name: "the same families", outer: ietf | openAI, inner: ietf | openAI,
			sent: ietf | openAI, showsOuter: true, showsInner: true},
		{name: "OpenAI outside, Anthropic inside", outer: ietf | openAI, inner: anthropic,
			sent: ietf | openAI | anthropic, showsOuter: true, showsInner: true},
		{name: "Anthropic outside, OpenAI inside", outer: anthropic, inner: openAI,
			sent: anthropic | openAI, showsOuter: true, showsInner: true},
		{name: "IETF outside, OpenAI inside", outer: ietf, inner: openAI,
			sent: ietf | openAI, showsOuter: true, showsInner: true},
		{name: "OpenAI outside, IETF inside", outer: openAI, inner: ietf,
			sent: openAI | ietf, showsOuter: true, showsInner: true},
		{name: "more families outside", outer: ietf | openAI | anthropic, inner: openAI,
			sent: ietf | openAI | anthropic, showsOuter: true, showsInner: true},
		{name: "none outside", outer: 0, inner: ietf | openAI | anthropic,
			sent: ietf | openAI | anthropic, showsInner: true},
		{name: "none inside", outer: ietf | openAI | anthropic, inner: 0,
			sent: ietf | openAI | anthropic, showsOuter: true},
		{name: "none between", outer: ietf | openAI, inner: anthropic, between: true,
			sent: ietf | openAI | anthropic, showsOuter: true, showsInner: true},
		{name: "failed open outside", outer: ietf | openAI, inner: anthropic, outerFails: true,
			sent: anthropic, showsInner: true},
		{name: "failed open inside", outer: ietf | openAI, inner: anthropic, innerFails: true,
			sent: ietf | openAI, showsOuter: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			envOf := func(fails bool) *env {
				if fails {
					return brokenEnv(t, stoppedServer(t))
				}
				return e
			}
			limit := func(l httpadmit.Limit, fails bool) httpadmit.LimitsFunc {
				if fails {
					l = failOpen(l)
				}
				return fixed(l)
			}
			key, route, model := uniqueKey("key"), uniqueKey("route"), uniqueKey("model")
			outer := envOf(c.outerFails).middleware(limit(window("api_key", key, ratelimit.MetricRequests, outerQuota, 1), c.outerFails),
				httpadmit.WithHeaders(c.outer))
			inner := envOf(c.innerFails).middleware(limit(window("model", model, ratelimit.MetricRequests, innerQuota, 1), c.innerFails),
				httpadmit.WithHeaders(c.inner))
			h := inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			if c.between {
				h = e.middleware(fixed(window("route", route, ratelimit.MetricRequests, 100, 1)), httpadmit.WithHeaders(0))(h)
			}
			srv := httptest.NewServer(outer(h))
			defer srv.Close()

			for n := 1; n <= 3; n++ {
				resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				wantStatus := http.StatusOK
				if n > innerQuota && !c.innerFails {
					wantStatus = http.StatusTooManyRequests
				}
				if resp.StatusCode != wantStatus {
					t.Fatalf("request %d: status %d, want %d", n, resp.StatusCode, wantStatus)
				}
				// Each limit shows what its middleware decided: the outer
				// one took every request, the inner one's count stops at
				// its quota.
				var shown []shownLimit
				if c.showsOuter {
					shown = append(shown, shownLimit{"api_key-requests", outerQuota, outerQuota - n})
				}
				if c.showsInner {
					shown = append(shown, shownLimit{"model-requests", innerQuota, max(innerQuota-n, 0)})
				}
				if len(shown) == 1 {
					shown[0].name = ratelimit.MetricRequests // named as if it were the only one
				}
				checkFamilies(t, "request "+strconv.Itoa(n), resp.Header, c.sent, shown)
			}
			e.nothingHeld()
		})
	}
}

// shownLimit is a requests limit as the headers should show it.
type shownLimit struct {
	name             string
	quota, remaining int
}

// checkFamilies checks that h carries families, and no other, showing the
// limits shown: all of them in the IETF headers, the one with the least
// left in the OpenAI and Anthropic ones.
func checkFamilies(t *testing.T, what string, h http.Header, families httpadmit.HeaderFamily, shown []shownLimit) {
	t.Helper()
	w := int64(longWindow / time.Second)
	var wantPolicy, wantState []sfItem
	binding := shown[0]
	for _, l := range shown {
		wantPolicy = append(wantPolicy, sfItem{l.name, map[string]any{"q": int64(l.quota), "w": w}})
		wantState = append(wantState, sfItem{l.name, map[string]any{"r": int64(l.remaining)}})
		if l.remaining < binding.remaining {
			binding = l
		}
	}
	if families&httpadmit.HeadersIETF == 0 {
		wantPolicy, wantState = nil, nil
	}
	if diff := cmp.Diff(wantPolicy, parseList(t, h, httpadmit.HeaderRateLimitPolicy)); diff != "" {
		t.Errorf("%s: RateLimit-Policy (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(wantState, withoutT(parseList(t, h, httpadmit.HeaderRateLimit))); diff != "" {
		t.Errorf("%s: RateLimit (-want +got):\n%s", what, diff)
	}
	for _, f := range []struct {
		family           httpadmit.HeaderFamily
		limit, remaining string
	}{
		{httpadmit.HeadersOpenAI, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests"},
		{httpadmit.HeadersAnthropic, "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining"},
	} {
		want := []string{"", ""}
		if families&f.family != 0 {
			want = []string{strconv.Itoa(binding.quota), strconv.Itoa(binding.remaining)}
		}
		if got := []string{h.Get(f.limit), h.Get(f.remaining)}; !cmp.Equal(want, got) {
			t.Errorf("%s: %s, %s = %q, want %q (%s)", what, f.limit, f.remaining, got, want, binding.name)
		}
	}
}

// A middleware inside another one that sends other families shows its
// limits in those families too, and keeps their fields to its values when
// the handler adds the upstream's (as a httputil.ReverseProxy does): the
// outer middleware, which had no limit to show (a shadow limit alone),
// set none of them, and its writer keeps none.
func TestNestedMiddlewareKeepsTheFamiliesSentAroundItToItsValues(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key, model := uniqueKey("key"), uniqueKey("model")
	outer := e.middleware(fixed(shadow(window("api_key", key, ratelimit.MetricRequests, 10, 1))))
	inner := e.middleware(fixed(window("model", model, ratelimit.MetricRequests, 2, 1)), httpadmit.WithHeaders(httpadmit.HeadersAnthropic))
	srv := httptest.NewServer(outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range upstreamRateLimitHeaders {
			w.Header().Add(k, v)
		}
		_, _ = io.WriteString(w, "ok")
	}))))
	defer srv.Close()
	header := postServed(t, srv.URL)
	for name, want := range map[string][]string{
		"x-ratelimit-limit-requests":             {"2"},
		"x-ratelimit-remaining-requests":         {"1"},
		"anthropic-ratelimit-requests-limit":     {"2"},
		"anthropic-ratelimit-requests-remaining": {"1"},
		// The inner middleware has no tokens limit: those are the upstream's.
		"x-ratelimit-remaining-tokens": {upstreamRateLimitHeaders["x-ratelimit-remaining-tokens"]},
	} {
		if got := header.Values(name); !cmp.Equal(want, got) {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if diff := cmp.Diff([]sfItem{{"requests", map[string]any{"r": int64(1)}}}, withoutT(parseList(t, header, httpadmit.HeaderRateLimit))); diff != "" {
		t.Errorf("RateLimit (-want +got):\n%s", diff)
	}
	e.nothingHeld()
}

// withoutT is items without the t parameter, which depends on the time of
// the decision.
func withoutT(items []sfItem) []sfItem {
	for _, it := range items {
		delete(it.Params, "t")
	}
	return items
}
