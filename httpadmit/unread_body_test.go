package httpadmit_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Over HTTP/1, net/http sees a client leave (and cancels the request's
// context) only once the request's body was read to its end: a handler
// that reads it is released as client_disconnected when its client
// leaves, one that leaves it unread never learns, and is committed, as the
// package documentation says.
func TestDisconnectIsSeenOnceTheBodyWasRead(t *testing.T) {
	t.Parallel()
	for _, read := range []bool{true, false} {
		t.Run(fmt.Sprintf("body read %v", read), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("unread")
			started, seen := make(chan struct{}), make(chan bool, 1)
			srv := httptest.NewServer(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(
				http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					if read {
						_, _ = io.Copy(io.Discard, r.Body)
					}
					close(started)
					select {
					case <-r.Context().Done():
						seen <- true
					case <-time.After(time.Second):
						seen <- false
					}
				})))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			body := `{"model": "m", "max_tokens": 100}`
			if _, err := fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: gateway\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				t.Fatal(err)
			}
			<-started
			_ = conn.Close()
			if got := <-seen; got != read {
				t.Fatalf("the handler saw its client leave: %v, want %v", got, read)
			}
			if read {
				e.releasedAs(key, "client_disconnected")
				return
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				rows, err := testq.ReservationsByReason(context.Background(), e.pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) == 1 && rows[0].Status == ratelimit.StatusCommitted {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("reservations %+v, want the one committed", rows)
				}
			}
			e.nothingHeld()
		})
	}
}
