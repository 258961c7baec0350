package httpadmit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// startHTTP2 serves h over TLS with HTTP/2, and returns a client for it.
func startHTTP2(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, srv.Client()
}

// On HTTP/2, a handler that asserts http.Pusher finds the server's through
// the middleware, as without it. The middleware's writer used to hide it.
func TestHandlerPushesOverHTTP2(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	type result struct {
		proto  string
		pusher bool
		err    error
	}
	results := make(chan result, 2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := result{proto: r.Proto}
		var p http.Pusher
		if p, res.pusher = w.(http.Pusher); res.pusher {
			res.err = p.Push("/style.css", nil)
		}
		results <- res
		_, _ = io.WriteString(w, "ok")
	})
	for _, h := range []http.Handler{handler, e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(handler)} {
		srv, client := startHTTP2(t, h)
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	bare, behind := <-results, <-results
	if bare.proto != "HTTP/2.0" || !bare.pusher {
		t.Fatalf("without the middleware: %+v, want an http.Pusher on HTTP/2.0", bare)
	}
	if !behind.pusher {
		t.Fatalf("behind the middleware, the writer of an HTTP/2 request is no http.Pusher")
	}
	// The Go client refuses pushes (SETTINGS_ENABLE_PUSH 0): both say so alike.
	if !errors.Is(behind.err, bare.err) {
		t.Errorf("Push behind the middleware: %v, want %v as without it", behind.err, bare.err)
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests = %+v, want %+v", got, want)
	}

	// A writer that cannot push does not seem to be one.
	e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Pusher); ok {
			t.Error("the writer of a response recorder is an http.Pusher behind the middleware")
		}
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	e.nothingHeld()
}
