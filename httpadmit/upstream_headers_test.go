package httpadmit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// upstreamRateLimitHeaders are what an LLM provider answers with: its own
// rate-limit headers, about the gateway's account with it.
var upstreamRateLimitHeaders = map[string]string{
	httpadmit.HeaderRateLimitPolicy:           `"provider";q=5000;w=60`,
	httpadmit.HeaderRateLimit:                 `"provider";r=4999;t=1`,
	"x-ratelimit-limit-requests":              "5000",
	"x-ratelimit-remaining-requests":          "4999",
	"x-ratelimit-reset-requests":              "12ms",
	"x-ratelimit-limit-tokens":                "2000000",
	"x-ratelimit-remaining-tokens":            "1999000",
	"x-ratelimit-reset-tokens":                "30ms",
	"anthropic-ratelimit-requests-limit":      "5000",
	"anthropic-ratelimit-requests-remaining":  "4999",
	"anthropic-ratelimit-requests-reset":      "2026-01-01T00:00:00Z",
	"anthropic-ratelimit-tokens-limit":        "2000000",
	"anthropic-ratelimit-tokens-remaining":    "1999000",
	"anthropic-ratelimit-tokens-reset":        "2026-01-01T00:00:00Z",
	"x-request-id":                            "req_123", // not a rate-limit header: passed on
	"openai-processing-ms":                    "42",
	"anthropic-organization-id":               "org_123",
	"x-ratelimit-remaining-requests-per-hour": "9", // not one the middleware sets
}

// A handler that adds values to the rate-limit headers the middleware set
// (a httputil.ReverseProxy copies the upstream's headers with Add, and
// OpenAI and Anthropic answer with x-ratelimit-* and anthropic-ratelimit-*
// of their own) would send each field twice, the middleware's value and
// the upstream's: a client reading x-ratelimit-remaining-tokens gets
// "99000, 1999000" (Python's and JavaScript's header maps join them),
// and the second speaks of the gateway's account with the provider. The
// middleware's value is the one that goes out, however the header is sent;
// other headers pass on untouched.
func TestUpstreamRateLimitHeadersDoNotDoubleTheMiddlewares(t *testing.T) {
	t.Parallel()
	addUpstream := func(h http.Header) {
		for k, v := range upstreamRateLimitHeaders {
			h.Add(k, v)
		}
	}
	file := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(file, []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addUpstream(w.Header())
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: ok\n\n")
	}))
	t.Cleanup(upstream.Close)
	proxy := quietProxy(t, upstream.URL, nil)
	// An upstream that sends 103 Early Hints first: the ReverseProxy
	// forwards it, then clears the whole header map (net/http does not for
	// a 1xx), the middleware's values with it, and copies the final
	// response's headers into the empty map.
	hinting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		addUpstream(w.Header())
		_, _ = io.WriteString(w, "data: ok\n\n")
	}))
	t.Cleanup(hinting.Close)
	hintingProxy := quietProxy(t, hinting.URL, nil)

	for _, c := range []struct {
		name    string
		handler http.Handler
	}{
		{"ReverseProxy", proxy},
		{"ReverseProxy, 103 Early Hints first", hintingProxy},
		{"WriteHeader", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			w.WriteHeader(http.StatusOK)
		})},
		{"Write", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			_, _ = w.Write([]byte("ok"))
		})},
		{"WriteString", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			_, _ = io.WriteString(w, "ok")
		})},
		{"Flush", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		})},
		{"Copy", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			_, _ = io.Copy(w, strings.NewReader("ok"))
		})},
		{"Copy from a file", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			f, err := os.Open(file)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			_, _ = io.Copy(w, f)
		})},
		{"103 Early Hints first", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			addUpstream(w.Header())
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Add("x-ratelimit-remaining-tokens", "1999000")
			w.WriteHeader(http.StatusOK)
		})},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			mw := e.middleware(fixed(
				window("api_key", key, ratelimit.MetricRequests, 100, 1),
				window("api_key", key, ratelimit.MetricTokens, 100_000, 1000),
			), httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic))
			srv := httptest.NewServer(mw(c.handler))
			defer srv.Close()
			header := postServed(t, srv.URL)
			for name, theirs := range upstreamRateLimitHeaders {
				got := header.Values(name)
				switch {
				case strings.HasPrefix(name, "x-request") || strings.HasPrefix(name, "openai-") ||
					strings.HasPrefix(name, "anthropic-organization") || strings.HasSuffix(name, "-per-hour"):
					if len(got) != 1 || got[0] != theirs {
						t.Errorf("%s = %q, want the upstream's %q passed on", name, got, theirs)
					}
				case len(got) != 1 || got[0] == theirs:
					t.Errorf("%s = %q, want the middleware's value alone", name, got)
				}
			}
			if got := header.Get("x-ratelimit-remaining-tokens"); got != "99000" {
				t.Errorf("x-ratelimit-remaining-tokens = %q, want 99000", got)
			}
			e.nothingHeld()
		})
	}
}

// A rate-limit header the middleware has no value for (here the tokens
// ones, with no limit on tokens) is the handler's: the upstream's passes
// on, as any header the handler sets.
func TestUpstreamRateLimitHeadersTheMiddlewareDoesNotSetPassOn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("x-ratelimit-remaining-tokens", "1999000")
		w.Header().Add("x-ratelimit-remaining-requests", "4999")
		_, _ = io.WriteString(w, "ok")
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if got := rec.Header().Values("x-ratelimit-remaining-tokens"); len(got) != 1 || got[0] != "1999000" {
		t.Errorf("x-ratelimit-remaining-tokens = %q, want the handler's", got)
	}
	if got := rec.Header().Values("x-ratelimit-remaining-requests"); len(got) != 1 || got[0] != "99" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want the middleware's 99 alone", got)
	}
	e.nothingHeld()
}

// postServed posts an empty JSON object to url, reads the answer's body to its end and returns
// the answer's header, failing the test unless its status is 200.
func postServed(t *testing.T, url string) http.Header {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Header
}
