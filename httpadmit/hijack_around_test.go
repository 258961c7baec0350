package httpadmit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// unwrapOnly is another middleware's writer around the server's, outside
// httpadmit, with Unwrap but no Hijack or Flush (as many logging and
// metrics wrappers are): http.ResponseController reaches the server's
// writer through it, around httpadmit's.
type unwrapOnly struct{ http.ResponseWriter }

func (w unwrapOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A hijack through http.ResponseController that goes around the
// middleware's writer (an outer wrapper with Unwrap but no Hijack) is
// still no reason to panic: a flush afterwards is refused with
// http.ErrHijacked, as after a hijack the middleware saw, and the session
// is committed. The flush used to reach net/http's HTTP/1 writer, which
// panics there (its buffer went back to a pool at Hijack), and the panic
// released the session's request as a handler panic. A stream that was not
// hijacked flushes through as before.
func TestFlushAfterHijackAroundTheMiddleware(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			// No hijack: a flush goes through to the client.
			_, _ = io.WriteString(w, "streamed")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController.Flush of a stream: %v", err)
			}
			return
		}
		if _, ok := w.(http.Hijacker); ok {
			t.Error("the middleware's writer is an http.Hijacker over a writer that is not one")
		}
		conn := answerHijacked(t, w)
		if conn == nil {
			return
		}
		defer conn.Close()
		if err := http.NewResponseController(w).Flush(); !errors.Is(err, http.ErrHijacked) {
			t.Errorf("ResponseController.Flush after Hijack: %v, want http.ErrHijacked", err)
		}
		w.(http.Flusher).Flush()
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(unwrapOnly{w}, r)
	}))
	defer srv.Close()
	getHijacked(t, srv.URL)
	resp, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "streamed" {
		t.Errorf("stream: %d %q, want 200 \"streamed\"", resp.StatusCode, body)
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 2}); got != want {
		t.Errorf("requests = %+v, want %+v: the hijacked session was served", got, want)
	}
}
