package httpadmit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// hijackOnly is another middleware's writer with Hijack but neither Flush
// nor Unwrap: a handler behind it cannot flush.
type hijackOnly struct{ http.ResponseWriter }

func (w hijackOnly) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// flushSeen is what a handler sees of flushing its writer, and what its
// client gets after that flush and a 418.
type flushSeen struct {
	flusher      bool   // w.(http.Flusher)
	flush        string // the error of http.NewResponseController(w).Flush(), or "<nil>"
	notSupported bool   // that error wraps http.ErrNotSupported
	status       int
}

// http.NewResponseController(w).Flush() through the middleware returns
// what it returns without it: nil when the writer under it flushes, and
// an error wrapping http.ErrNotSupported when it cannot (under
// http.TimeoutHandler, or another middleware's writer without Flush),
// with nothing sent: a status the handler writes after it still goes out.
// A failed flush used to send the header with 200 when the writer under
// the middleware's has Unwrap (another middleware's, or another
// httpadmit's): the write of no bytes that looks for a hijack made around
// the middleware's writer.
//
// The writer is an http.Flusher exactly when that flush works, so that a
// handler that asserts one before it streams finds out, as without the
// middleware; it was one always, and its Flush did nothing. Behind an
// Unwrap wrapper over a writer that flushes it is one, where that
// wrapper is not: the flush works.
func TestFlushThroughTheMiddlewareAsWithoutIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		name        string
		around      func(http.Handler) http.Handler
		flushes     bool // the writer the middleware gets can be flushed
		bareFlusher bool // w.(http.Flusher) without the middleware
	}{
		{name: "server", around: func(h http.Handler) http.Handler { return h }, flushes: true, bareFlusher: true},
		{name: "Unwrap wrapper", around: unwrappingMiddleware, flushes: true},
		{name: "TimeoutHandler", around: func(h http.Handler) http.Handler {
			return http.TimeoutHandler(h, time.Minute, "")
		}},
		{name: "Unwrap wrapper under TimeoutHandler", around: func(h http.Handler) http.Handler {
			return http.TimeoutHandler(unwrappingMiddleware(h), time.Minute, "")
		}},
		{name: "Hijack wrapper", around: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(hijackOnly{w}, r) })
		}},
	} {
		for _, middlewares := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("%s/middlewares=%d", tc.name, middlewares), func(t *testing.T) {
				t.Parallel()
				handlerSaw := make(chan flushSeen, 1)
				var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, flusher := w.(http.Flusher)
					err := http.NewResponseController(w).Flush()
					handlerSaw <- flushSeen{flusher: flusher, flush: fmt.Sprint(err), notSupported: errors.Is(err, http.ErrNotSupported)}
					w.WriteHeader(http.StatusTeapot)
					_, _ = io.WriteString(w, "body")
				})
				keys := []string{uniqueKey("inner"), uniqueKey("outer")}
				for _, key := range keys[:middlewares] {
					h = e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(h)
				}
				srv := httptest.NewUnstartedServer(tc.around(h))
				// The 418 after a flush that sent the header is superfluous.
				srv.Config.ErrorLog = log.New(io.Discard, "", 0)
				srv.Start()
				defer srv.Close()
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var seen flushSeen
				select {
				case seen = <-handlerSaw:
				case <-time.After(10 * time.Second):
					t.Fatalf("the handler did not run: %d %q", resp.StatusCode, body)
				}
				seen.status = resp.StatusCode

				want := flushSeen{flusher: tc.flushes, flush: "<nil>", status: http.StatusOK}
				if middlewares == 0 {
					want.flusher = tc.bareFlusher
				}
				if !tc.flushes {
					want.flush, want.notSupported = http.ErrNotSupported.Error(), true
					want.status = http.StatusTeapot // the failed flush sent nothing
				}
				if seen != want {
					t.Errorf("handler and client saw %+v, want %+v", seen, want)
				}
				if string(body) != "body" {
					t.Errorf("body %q, want \"body\"", body)
				}
				for _, key := range keys[:middlewares] {
					if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
						t.Errorf("requests = %+v, want %+v: the request was served", got, want)
					}
				}
			})
		}
	}
}
