package httpadmit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

// errAfter is a source that yields data and then fails, as an upstream's
// body that breaks off.
type errAfter struct {
	data string
	err  error
}

func (r *errAfter) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// On HTTP/1, io.Copy and http.ServeFile reach the server's io.ReaderFrom
// through the middleware, which sends a file with sendfile(2) as without
// it; the middleware's writer used to hide it, and every file went through
// user space. A source that fails (an upstream's body that breaks off) is
// no cut stream: nothing failed on the way to the client.
func TestCopyReachesTheServersReaderFrom(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	name := filepath.Join(t.TempDir(), "file.txt")
	content := strings.Repeat("0123456789abcdef", 4096)
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	readerFrom := make(chan bool, 2)
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, bare := w.(io.ReaderFrom)
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, behind := w.(io.ReaderFrom)
			readerFrom <- bare && !behind
			switch r.URL.Path {
			case "/servefile":
				http.ServeFile(w, r, name)
			case "/copy":
				f, err := os.Open(name)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				if n, err := io.Copy(w, f); n != int64(len(content)) || err != nil {
					t.Errorf("io.Copy from the file: %d, %v", n, err)
				}
			case "/upstream-breaks":
				broken := errors.New("upstream: unexpected EOF")
				if _, err := io.Copy(w, &errAfter{data: content, err: broken}); !errors.Is(err, broken) {
					t.Errorf("io.Copy from a broken upstream: %v, want its error", err)
				}
			}
		})).ServeHTTP(w, r)
	}))
	defer srv.Close()
	for _, path := range []string{"/servefile", "/copy", "/upstream-breaks"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != content {
			t.Errorf("%s: %d, %d bytes, %v; want 200 and the %d bytes", path, resp.StatusCode, len(body), err, len(content))
		}
		if <-readerFrom {
			t.Errorf("%s: the server's writer is an io.ReaderFrom, the middleware's is not", path)
		}
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 3}); got != want {
		t.Errorf("requests = %+v, want %+v: all were served", got, want)
	}
}

// stringRecorder is a server's writer with its own WriteString, as
// net/http's are, that counts its calls and, when failWith is set, fails
// them (and them only: Write still succeeds).
type stringRecorder struct {
	*httptest.ResponseRecorder
	writeStrings int
	failWith     error
}

func (w *stringRecorder) WriteString(s string) (int, error) {
	w.writeStrings++
	if w.failWith != nil {
		return 0, w.failWith
	}
	return w.ResponseRecorder.WriteString(s)
}

// io.WriteString through the middleware reaches the server's WriteString,
// without copying the string into a []byte first; the middleware's writer
// used to hide it. Its failure is a cut stream, as a Write's is, and the
// refusal of a body after 204 or 304 is not.
func TestWriteStringReachesTheServersStringWriter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))
	for _, tc := range []struct {
		name     string
		failWith error
		want     book // requests used after this request
	}{
		{"written", nil, book{Used: 1}},
		{"cut", errors.New("write: broken pipe"), book{Used: 1}},
		{"body not allowed", http.ErrBodyNotAllowed, book{Used: 2}},
	} {
		w := &stringRecorder{ResponseRecorder: httptest.NewRecorder(), failWith: tc.failWith}
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := io.WriteString(w, "data: x\n\n")
			if !errors.Is(err, tc.failWith) || (err == nil && n != 9) {
				t.Errorf("%s: io.WriteString = %d, %v; want 9, %v", tc.name, n, err, tc.failWith)
			}
		})).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
		if w.writeStrings != 1 {
			t.Errorf("%s: the server's WriteString was called %d times, want 1", tc.name, w.writeStrings)
		}
		if tc.failWith == nil && (w.Code != http.StatusOK || w.Body.String() != "data: x\n\n") {
			t.Errorf("%s: %d %q, want 200 and the string", tc.name, w.Code, w.Body)
		}
		if got := e.books("api_key", key, ratelimit.MetricRequests); got != tc.want {
			t.Errorf("%s: requests = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	e.nothingHeld()
}
