package httpadmit_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A handler that takes the connection by asserting http.Hijacker, as
// gorilla/websocket's Upgrade does, finds it through the middleware
// whenever the server's writer has it, and the lease holds for the whole
// hijacked session. The middleware's writer used to hide it: such a
// handler answered 500 behind the middleware.
func TestHandlerHijacksTheConnection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("model")
	mw := e.middleware(fixed(concurrent("model", key, 2)))
	leasesMidSession := make(chan int64, 1)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "websocket: response does not implement http.Hijacker", http.StatusInternalServerError)
			return
		}
		conn, brw, err := h.Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		leasesMidSession <- e.liveLeases("model", key)
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = brw.Flush()
	})))
	defer srv.Close()
	getHijacked(t, srv.URL)
	if got := <-leasesMidSession; got != 1 {
		t.Errorf("live leases during the hijacked session = %d, want 1", got)
	}
	e.nothingHeld()

	// A writer that cannot be hijacked does not seem to be one.
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Hijacker); ok {
			t.Error("the writer of a response recorder is an http.Hijacker behind the middleware")
		}
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the writer is not an http.Flusher")
		}
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	e.nothingHeld()
}

// A write to the writer after the handler took the connection is refused
// by the server (http.ErrHijacked) before it reaches anything: the session
// the handler served on the connection was not cut, and the request is
// committed, not released as a cut stream.
func TestWriteAfterHijackIsNoCutStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	srv := httptest.NewServer(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn := answerHijacked(t, w)
			if conn == nil {
				return
			}
			defer conn.Close()
			// An error path that still answers on the writer.
			if _, err := io.WriteString(w, "too late"); !errors.Is(err, http.ErrHijacked) {
				t.Errorf("write after Hijack: %v, want http.ErrHijacked", err)
			}
		})))
	defer srv.Close()
	getHijacked(t, srv.URL)
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests = %+v, want %+v: the hijacked session was served", got, want)
	}
}

// answerHijacked takes the connection through http.ResponseController
// and answers on it what getHijacked expects: a 200 "hijacked". It returns
// the connection, for the caller to close, or nil when the hijack failed
// (reported).
func answerHijacked(t *testing.T, w http.ResponseWriter) net.Conn {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("Hijack: %v", err)
		return nil
	}
	_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
	if err := brw.Flush(); err != nil {
		t.Errorf("flushing the hijacked connection: %v", err)
	}
	return conn
}

// getHijacked GETs url and checks that the hijacked connection answered it:
// a 200 with the body "hijacked".
func getHijacked(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hijacked" {
		t.Fatalf("%d %q, want the hijacked connection's 200 \"hijacked\"", resp.StatusCode, body)
	}
}

// A flush of the writer after the handler took the connection is refused
// with http.ErrHijacked, as a write is, and the hijacked session is
// committed. net/http's own HTTP/1 writer panics there (nil pointer in
// response.FlushError, its buffer given back at Hijack); the middleware's
// writer used to pass the flush on, so the panic released the request as
// a handler panic although the session ran.
func TestFlushAfterHijackIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	srv := httptest.NewServer(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn := answerHijacked(t, w)
			if conn == nil {
				return
			}
			defer conn.Close()
			// A streaming helper that flushes at the end, whatever happened.
			if err := http.NewResponseController(w).Flush(); !errors.Is(err, http.ErrHijacked) {
				t.Errorf("ResponseController.Flush after Hijack: %v, want http.ErrHijacked", err)
			}
			w.(http.Flusher).Flush()
		})))
	defer srv.Close()
	getHijacked(t, srv.URL)
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests = %+v, want %+v: the hijacked session was served", got, want)
	}
}

// io.Copy of a file to the writer after the handler took the connection
// is refused with http.ErrHijacked, as a write is, and the session is
// committed. A handler that sent its 101 through WriteHeader before
// hijacking (coder/websocket's Accept does) has net/http's HTTP/1 writer
// panic there (its ReadFrom flushes the buffer given back at Hijack); the
// middleware passed the copy on, so the panic released the request as a
// handler panic although the session ran. So when the hijack goes around
// the middleware's writer (an outer writer with Unwrap and ReadFrom but no
// Hijack): the copy used to reach net/http's ReadFrom through it.
func TestCopyAfterHijackIsRefused(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "file.txt")
	if err := os.WriteFile(name, []byte(strings.Repeat("x", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		outer func(http.ResponseWriter) http.ResponseWriter
	}{
		{"through the middleware", func(w http.ResponseWriter) http.ResponseWriter { return w }},
		{"around the middleware", func(w http.ResponseWriter) http.ResponseWriter { return unwrapReadFrom{unwrapOnly{w}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			copyAfterHijack(t, name, tc.outer)
		})
	}
}

// unwrapReadFrom is an outer writer with Unwrap and the server's ReadFrom
// but no Hijack.
type unwrapReadFrom struct{ unwrapOnly }

func (w unwrapReadFrom) ReadFrom(src io.Reader) (int64, error) {
	return w.ResponseWriter.(io.ReaderFrom).ReadFrom(src)
}

// copyAfterHijack serves a 101, a hijack and a copy of the file name to
// the writer, behind outer around the middleware.
func copyAfterHijack(t *testing.T, name string, outer func(http.ResponseWriter) http.ResponseWriter) {
	e := setup(t)
	key := uniqueKey("key")
	inner := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "test")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			f, err := os.Open(name)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			if _, err := io.Copy(w, f); !errors.Is(err, http.ErrHijacked) {
				t.Errorf("io.Copy after Hijack: %v, want http.ErrHijacked", err)
			}
		}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(outer(w), r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The 101 went out before the hijack: read the connection until the
	// handler closes it, after its hijack. Closed at once, the client
	// could leave first, and the server cancel the request's context
	// before the hijack (a client gone: released, client_disconnected).
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("status %d, want 101", resp.StatusCode)
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests = %+v, want %+v: the hijacked session was served", got, want)
	}
}
