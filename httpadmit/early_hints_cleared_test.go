package httpadmit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The middleware takes a header map found empty after an informational
// status to have been cleared (as a httputil.ReverseProxy clears it after
// forwarding a 1xx), and puts back the rate-limit fields that went out
// with the 1xx. It puts back its own alone: a field it has no value for
// that went out with the 1xx (the upstream's 103 carried it, or the
// handler set it) is the handler's, cleared with the rest, and the final
// response carries what the handler sets next, as without the middleware;
// it used to come back, and its value from the 103 to go out in place of
// the upstream's final one. A map emptied before any 1xx is the handler's
// choice, and nothing comes back. A field the middleware has no value for
// goes out as the handler made it, twice if it added it twice.
func TestAClearedHeaderMapGetsTheMiddlewaresFieldsBackAlone(t *testing.T) {
	t.Parallel()
	hinting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.Header().Set("x-ratelimit-remaining-tokens", "5") // on the 103 only
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("x-ratelimit-remaining-tokens")
		for k, v := range upstreamRateLimitHeaders {
			w.Header().Add(k, v)
		}
		_, _ = io.WriteString(w, "data: ok\n\n")
	}))
	t.Cleanup(hinting.Close)
	ours := []string{"x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining", httpadmit.HeaderRateLimitPolicy}

	for _, c := range []struct {
		name    string
		handler http.Handler
		want    map[string][]string // nil: absent
	}{
		{"cleared after a 103", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header())
			w.WriteHeader(http.StatusOK)
		}), map[string][]string{"x-ratelimit-remaining-requests": {"99"}, "anthropic-ratelimit-requests-remaining": {"99"}}},
		{"emptied before any 1xx", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			clear(w.Header())
			w.WriteHeader(http.StatusOK)
		}), map[string][]string{"x-ratelimit-remaining-requests": nil, "anthropic-ratelimit-requests-remaining": nil,
			httpadmit.HeaderRateLimitPolicy: nil}},
		{"a field it has no value for set before a 103, then cleared", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("x-ratelimit-remaining-tokens", "5")
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header())
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
		}), map[string][]string{"x-ratelimit-remaining-requests": {"99"}, "x-ratelimit-remaining-tokens": nil}},
		{"ReverseProxy, the upstream's 103 with a field it has no value for", quietProxy(t, hinting.URL, nil),
			map[string][]string{"x-ratelimit-remaining-requests": {"99"}, "anthropic-ratelimit-requests-remaining": {"99"},
				"x-ratelimit-remaining-tokens": {"1999000"}}},
		{"a field it has no value for added twice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("x-ratelimit-remaining-tokens", "7")
			w.Header().Add("x-ratelimit-remaining-tokens", "8")
			w.WriteHeader(http.StatusOK)
		}), map[string][]string{"x-ratelimit-remaining-requests": {"99"}, "x-ratelimit-remaining-tokens": {"7", "8"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			mw := e.middleware(fixed(window("api_key", uniqueKey("key"), ratelimit.MetricRequests, 100, 1)),
				httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic))
			srv := httptest.NewServer(mw(c.handler))
			defer srv.Close()
			header := postServed(t, srv.URL)
			for name, want := range c.want {
				if got := header.Values(name); !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if _, emptied := c.want[httpadmit.HeaderRateLimitPolicy]; !emptied {
				for _, name := range ours {
					if len(header.Values(name)) != 1 {
						t.Errorf("%s = %q, want the middleware's value", name, header.Values(name))
					}
				}
			}
			e.nothingHeld()
		})
	}
}
