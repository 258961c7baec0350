package httpadmit_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// bufferingWriter is the writer of a middleware around httpadmit's that
// holds the body until it is flushed (a compressing one, say; net/http's
// own writer holds a few KB too): every write succeeds, and a flush sends
// the body to a client that is gone.
type bufferingWriter struct {
	header http.Header
	body   bytes.Buffer
}

func (w *bufferingWriter) Header() http.Header         { return w.header }
func (w *bufferingWriter) WriteHeader(int)             {}
func (w *bufferingWriter) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *bufferingWriter) FlushError() error           { return errors.New("write: broken pipe") }

// The request is settled when the handler returns: what goes out after
// (the last flush of a body still buffered then, by the server or by a
// middleware around this one) is out of the middleware's sight, and a
// client gone by then is not seen. Such a request is committed (its
// upstream ran to the end); a flush that fails while the handler runs
// releases it as a cut stream.
func TestFlushAfterTheHandlerReturnedIsUnseen(t *testing.T) {
	t.Parallel()
	for _, flushInside := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushInside=%v", flushInside), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 10_000, 1000)))
			out := &bufferingWriter{header: http.Header{}}
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.WriteString(w, "data: x\n\n"); err != nil {
					t.Errorf("write into the buffer: %v", err)
				}
				if flushInside {
					if err := http.NewResponseController(w).Flush(); err == nil {
						t.Error("a flush to a client that is gone succeeded")
					}
				}
			})).ServeHTTP(out, httptest.NewRequest(http.MethodPost, "/", nil))
			if err := out.FlushError(); err == nil { // the middleware around, after the handler returned
				t.Fatal("the last flush to a client that is gone succeeded")
			}
			want := book{Used: 1000} // committed at its estimate
			if flushInside {
				want = book{} // released: a cut stream
			}
			if got := e.books("api_key", key, ratelimit.MetricTokens); got != want {
				t.Errorf("tokens = %+v, want %+v", got, want)
			}
			e.nothingHeld()
		})
	}
}
