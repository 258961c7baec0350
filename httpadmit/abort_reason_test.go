package httpadmit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A httputil.ReverseProxy ends a stream it could not copy to the end with
// a panic (http.ErrAbortHandler), whatever cut it. When its client left
// mid-stream (the user stopped the generation: the commonest way an LLM
// gateway's request ends early), the request is released as
// client_disconnected, as a handler that returns would be, not as
// handler_panic, which said the gateway's code had crashed. When the
// upstream broke off with the client still there, the panic is all the
// middleware knows: handler_panic.
func TestProxyAbortIsReleasedForWhatCutIt(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
			if i == 2 && r.URL.Path == "/breaks" {
				// The upstream dies mid-stream: its connection is cut
				// without the chunked body's end.
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(upstream.Close)
	proxy := quietProxy(t, upstream.URL, httpadmit.DiscardOnProxyError(nil))

	for _, c := range []struct {
		path, want string
		leave      bool
	}{
		{"/streams", httpadmit.ReasonClientDisconnected, true},
		{"/breaks", httpadmit.ReasonHandlerPanic, false},
	} {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			srv := httptest.NewUnstartedServer(e.middleware(fixed(
				window("api_key", key, ratelimit.MetricRequests, 100, 1),
				concurrent("model", key, 2),
			))(proxy))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+c.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); line != "data: 0\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			if c.leave {
				cancel()
			} else {
				_, _ = io.Copy(io.Discard, br) // the stream breaks off
			}
			resp.Body.Close()
			e.releasedAs(key, c.want)
			e.nothingHeld()
		})
	}
}
