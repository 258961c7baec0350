package httpadmit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A httputil.ReverseProxy that cannot get an answer from its upstream (it
// is unreachable, or ModifyResponse refused its answer) calls its
// ErrorHandler, whose 502 is a handler that returned: the middleware
// commits it, though no upstream served the request. DiscardOnProxyError
// as the ErrorHandler releases it (ReasonUpstreamError) and answers 502,
// or whatever the handler it wraps answers; a request the upstream
// served is committed as before.
func TestDiscardOnProxyError(t *testing.T) {
	t.Parallel()
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(live.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // nothing listens there any more
	var ownGot error
	own := func(w http.ResponseWriter, r *http.Request, err error) {
		ownGot = err
		w.WriteHeader(http.StatusGatewayTimeout)
	}
	refusing := quietProxy(t, live.URL, httpadmit.DiscardOnProxyError(nil))
	refusing.ModifyResponse = func(*http.Response) error { return errors.New("the gateway refuses the upstream's answer") }
	for _, c := range []struct {
		name     string
		proxy    *httputil.ReverseProxy
		status   int
		released bool
	}{
		{"ReverseProxy's own ErrorHandler", quietProxy(t, dead.URL, nil), http.StatusBadGateway, false}, // why the helper is there
		{"upstream unreachable", quietProxy(t, dead.URL, httpadmit.DiscardOnProxyError(nil)), http.StatusBadGateway, true},
		{"ModifyResponse failed", refusing, http.StatusBadGateway, true},
		{"a handler of one's own", quietProxy(t, dead.URL, httpadmit.DiscardOnProxyError(own)), http.StatusGatewayTimeout, true},
		{"upstream served", quietProxy(t, live.URL, httpadmit.DiscardOnProxyError(nil)), http.StatusOK, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t)
			key := uniqueKey("key")
			rec := httptest.NewRecorder()
			e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(c.proxy).
				ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))
			if rec.Code != c.status {
				t.Errorf("status %d, want %d", rec.Code, c.status)
			}
			if c.released {
				e.releasedAs(key, httpadmit.ReasonUpstreamError)
			}
			want := book{Used: 1}
			if c.released {
				want = book{}
			}
			if got := e.books("api_key", key, ratelimit.MetricRequests); got != want {
				t.Errorf("requests = %+v, want %+v", got, want)
			}
			e.nothingHeld()
		})
	}
	if ownGot == nil {
		t.Error("the wrapped handler was not given the proxy's error")
	}
}

// DiscardOnProxyError's handler called outside the middleware, or with no
// request, answers 502 all the same: there is nothing to release.
func TestDiscardOnProxyErrorOutsideTheMiddleware(t *testing.T) {
	t.Parallel()
	h := httpadmit.DiscardOnProxyError(nil)
	for _, r := range []*http.Request{httptest.NewRequest(http.MethodGet, "/", nil), nil} {
		rec := httptest.NewRecorder()
		h(rec, r, errors.New("upstream unreachable"))
		if rec.Code != http.StatusBadGateway {
			t.Errorf("request %v: status %d, want 502", r != nil, rec.Code)
		}
	}
}
