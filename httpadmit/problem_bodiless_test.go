package httpadmit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// A Problem whose Status has no content (204 and 304, which net/http
// refuses a body, and 205, which RFC 9110 forbids one) cannot be the
// response: over HTTP/2 its Content-Length went out without its body, and
// the client's read failed (unexpected EOF); over HTTP/1 a 204 or 304 came
// without the problem, a 205 with it. It is written as 500, in the body
// too, as an informational Status is.
func TestProblemWithABodilessStatusIsAServerError(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		for _, status := range []int{http.StatusNoContent, http.StatusResetContent, http.StatusNotModified} {
			t.Run(fmt.Sprintf("%d HTTP/2 %v", status, h2), func(t *testing.T) {
				t.Parallel()
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					httpadmit.WriteProblem(w, httpadmit.Problem{Type: "about:blank", Title: "Odd", Status: status})
				}))
				srv.EnableHTTP2 = h2
				srv.StartTLS()
				defer srv.Close()
				resp, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Fatalf("GET: %v", err)
				}
				raw, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				var body httpadmit.Problem
				if err != nil || json.Unmarshal(raw, &body) != nil {
					t.Fatalf("response %d (%s), body %q (%v): want a problem body", resp.StatusCode, resp.Proto, raw, err)
				}
				if resp.StatusCode != http.StatusInternalServerError || body.Status != http.StatusInternalServerError {
					t.Errorf("response %d with \"status\":%d in the body, want 500 in both", resp.StatusCode, body.Status)
				}
				if got, want := resp.ContentLength, int64(len(raw)); got != want {
					t.Errorf("Content-Length %d, body %d bytes", got, want)
				}
			})
		}
	}
}
