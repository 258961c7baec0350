package httpadmit_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A LimitsFunc has no writer to give http.MaxBytesReader (it reads the body
// through MaxBytesReader(nil, ...), as Example does), so the server is not
// told that the request was too large, which would make it close the
// connection. It needs not be: once the handler (here the 413 of the
// default error handler) sends the header, net/http reads what is left of
// the body, up to 256 KiB, and keeps the connection for the next request,
// or, when more is left (or an Expect: 100-continue body was cut short),
// answers with Connection: close and closes it. Either way no byte of the
// refused body is read as the next request. Checked on the wire, with the
// next request pipelined behind the refused one.
func TestBodyOverItsBoundLeavesNoBytesOnAKeptConnection(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(func(r *http.Request) ([]httpadmit.Limit, error) {
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, bound))
		if err != nil {
			return nil, fmt.Errorf("%w: reading the body: %w", httpadmit.ErrBadRequest, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		return []httpadmit.Limit{window("api_key", key, ratelimit.MetricRequests, 100, 1)}, nil
	})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served")
	})))
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		name      string
		size      int64 // of the refused body
		chunked   bool
		expect100 bool
		wantClose bool // else the pipelined request is served on the connection
	}{
		{name: "Content-Length, 64 KiB over", size: bound + 64<<10},
		{name: "chunked, 64 KiB over", size: bound + 64<<10, chunked: true},
		{name: "Content-Length, 3 MiB over", size: bound + 3<<20, wantClose: true},
		{name: "chunked, 3 MiB over", size: bound + 3<<20, chunked: true, wantClose: true},
		{name: "Expect: 100-continue, 64 KiB over", size: bound + 64<<10, expect100: true, wantClose: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			refused, err := http.NewRequest(http.MethodPost, srv.URL+"/", io.LimitReader(zeros{}, c.size))
			if err != nil {
				t.Fatal(err)
			}
			refused.ContentLength = c.size
			if c.chunked {
				refused.ContentLength = -1 // Write sends it chunked
			}
			if c.expect100 {
				refused.Header.Set("Expect", "100-continue") // the body follows at once, as a client may send it
			}
			next, err := http.NewRequest(http.MethodGet, srv.URL+"/next", nil)
			if err != nil {
				t.Fatal(err)
			}
			// Written while the responses are read: the server may answer
			// before it read the body, and close without reading the rest.
			written := make(chan error, 1)
			go func() {
				err := refused.Write(conn)
				if err == nil {
					err = next.Write(conn)
				}
				written <- err
			}()

			br := bufio.NewReader(conn)
			resp := readFinal(t, br, refused)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the 413's body: %v", err)
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d %s, want 413", resp.StatusCode, body)
			}
			if resp.Close != c.wantClose {
				t.Errorf("Connection: close sent: %v, want %v (Connection %q)", resp.Close, c.wantClose, resp.Header.Values("Connection"))
			}
			if c.wantClose {
				// The server closes the connection: nothing more comes, a
				// reset at most (the client was still sending).
				if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
					t.Errorf("after Connection: close read %d bytes, %v; want the connection closed", n, err)
				}
				return
			}
			if err := <-written; err != nil {
				t.Fatalf("writing the requests: %v", err)
			}
			resp = readFinal(t, br, next)
			body, err = io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the next response's body: %v", err)
			}
			if resp.StatusCode != http.StatusOK || string(body) != "served" {
				t.Errorf("next request on the connection: %d %q, want 200 \"served\" (the refused body's rest read as a request?)",
					resp.StatusCode, body)
			}
		})
	}
	e.nothingHeld()
}

// readFinal reads the final response to req from br, past any 1xx (the
// 100 Continue of a request that expected one).
func readFinal(t *testing.T, br *bufio.Reader, req *http.Request) *http.Response {
	t.Helper()
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if resp.StatusCode >= 200 {
			return resp
		}
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
