package httpadmit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A handler that writes past the Content-Length it declared (a bug: it
// copied an upstream's header, then changed the body it streams) has the
// write fail (http.ErrContentLength over HTTP/1, an error of its own over
// HTTP/2, once the header went out) and nothing of it sent: the client
// gets less than the answer, and its read fails. The middleware counts
// that as a cut stream, as the package documentation says: released
// (stream_cut) unless usage was reported, which is committed, since the
// upstream spent it.
func TestWritePastContentLengthIsACutStream(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		for _, reported := range []bool{false, true} {
			t.Run(fmt.Sprintf("HTTP/2 %v, usage reported %v", h2, reported), func(t *testing.T) {
				t.Parallel()
				e := setup(t)
				key := uniqueKey("k")
				writeErr := make(chan error, 1)
				h := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1000, 100)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if reported {
						if err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 7}); err != nil {
							t.Error(err)
						}
					}
					w.Header().Set("Content-Length", "10")
					_, err := io.WriteString(w, "hello")
					if err == nil {
						err = http.NewResponseController(w).Flush()
					}
					if err != nil {
						writeErr <- fmt.Errorf("the first write, within Content-Length: %w", err)
						return
					}
					if _, err := io.WriteString(w, ", world"); err == nil {
						writeErr <- fmt.Errorf("the write past Content-Length succeeded")
						return
					}
					writeErr <- nil
				}))
				srv := httptest.NewUnstartedServer(h)
				srv.EnableHTTP2 = h2
				srv.StartTLS()
				defer srv.Close()
				resp, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err == nil || string(body) != "hello" {
					t.Errorf("the client read %q, %v; want \"hello\" and an error (5 bytes of the 10 declared)", body, err)
				}
				if err := <-writeErr; err != nil {
					t.Fatal(err)
				}
				if !reported {
					e.releasedAs(key, httpadmit.ReasonStreamCut)
				}
				e.nothingHeld()
				want := book{}
				if reported {
					want.Used = 7
				}
				if got := e.books("api_key", key, ratelimit.MetricTokens); got != want {
					t.Errorf("tokens = %+v, want %+v", got, want)
				}
			})
		}
	}
}
