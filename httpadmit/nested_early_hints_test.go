package httpadmit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind two middlewares that send different header families (one for
// every route with the default IETF and OpenAI headers, one for an
// Anthropic-style route adding anthropic-ratelimit-*), a
// httputil.ReverseProxy whose upstream sends 103 Early Hints clears the
// header map after forwarding it. The final response carries the
// rate-limit fields it carries without the 103, with the middlewares'
// values alone: the outer one used to put its own fields back first, so
// that the inner one found the map no longer empty and restored nothing,
// and the upstream's fields of the inner one's families went out in place
// of its own.
func TestNestedMiddlewaresOfOtherFamiliesKeepTheirHeadersAfterEarlyHints(t *testing.T) {
	t.Parallel()
	upstream := func(hint bool) *httputil.ReverseProxy {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hint {
				w.Header().Set("Link", "</style.css>; rel=preload; as=style")
				w.WriteHeader(http.StatusEarlyHints)
			}
			for k, v := range upstreamRateLimitHeaders {
				w.Header().Add(k, v)
			}
			_, _ = io.WriteString(w, "data: ok\n\n")
		}))
		t.Cleanup(srv.Close)
		return quietProxy(t, srv.URL, nil)
	}
	plain, hinting := upstream(false), upstream(true)

	const ietf, openAI, anthropic = httpadmit.HeadersIETF, httpadmit.HeadersOpenAI, httpadmit.HeadersAnthropic
	for _, c := range []struct {
		name         string
		outer, inner httpadmit.HeaderFamily
		between      func(http.Handler) http.Handler // a middleware of another kind between them, if any
	}{
		{name: "OpenAI outside, Anthropic inside", outer: ietf | openAI, inner: ietf | anthropic},
		{name: "Anthropic outside, OpenAI inside", outer: ietf | anthropic, inner: openAI},
		{name: "the same families", outer: ietf | openAI, inner: ietf | openAI},
		{name: "fewer families inside", outer: ietf | openAI | anthropic, inner: openAI},
		{name: "a writer with Unwrap between", outer: ietf | openAI, inner: ietf | anthropic, between: unwrappingMiddleware},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			// Each proxy's request is the first on limits of its own, so
			// that both are decided alike.
			serve := func(proxy http.Handler) http.Header {
				key, model := uniqueKey("key"), uniqueKey("model")
				outer := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)), httpadmit.WithHeaders(c.outer))
				inner := e.middleware(fixed(window("model", model, ratelimit.MetricRequests, 10, 1)), httpadmit.WithHeaders(c.inner))
				h := inner(proxy)
				if c.between != nil {
					h = c.between(h)
				}
				srv := httptest.NewServer(outer(h))
				defer srv.Close()
				return postServed(t, srv.URL)
			}
			want, got := rateLimitFields(t, serve(plain)), rateLimitFields(t, serve(hinting))
			if len(want) == 0 {
				t.Fatal("no rate-limit fields without a 103")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rate-limit fields after a 103, against those without (-want +got):\n%s", diff)
			}
			e.nothingHeld()
		})
	}
}

// rateLimitFields are the rate-limit fields of h (all families) that do
// not depend on the time of the decision: the resets are left out, and t
// of RateLimit's items.
func rateLimitFields(t *testing.T, h http.Header) map[string]any {
	t.Helper()
	out := map[string]any{}
	for name := range upstreamRateLimitHeaders {
		switch {
		case strings.HasSuffix(name, "reset") || strings.Contains(name, "-reset-"):
		case name == httpadmit.HeaderRateLimit:
			items := parseList(t, h, name)
			for _, it := range items {
				delete(it.Params, "t")
			}
			out[name] = items
		case len(h.Values(name)) > 0:
			out[name] = h.Values(name)
		}
	}
	return out
}

// unwrappingMiddleware wraps the writer in one of its own that passes
// everything through and unwraps to it (a logging or metrics middleware).
func unwrappingMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(unwrapper{w}, r)
	})
}

type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }
