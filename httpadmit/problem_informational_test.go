package httpadmit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// A Problem whose Status is informational (1xx) cannot be the response:
// net/http sends a 1xx ahead of it (101 switches protocols), and the
// problem body then went out as a 200 OK saying "status":103. It is
// written as 500, as a Status that is no HTTP status code is.
func TestProblemWithAnInformationalStatusIsAServerError(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusContinue, http.StatusSwitchingProtocols, http.StatusEarlyHints, 199} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			httpadmit.WriteProblem(w, httpadmit.Problem{Type: "about:blank", Title: "Broken", Status: status})
		}))
		resp, err := http.Get(srv.URL)
		if err != nil {
			srv.Close()
			t.Fatalf("status %d: GET: %v", status, err)
		}
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		srv.Close()
		var body httpadmit.Problem
		if err != nil || json.Unmarshal(raw, &body) != nil {
			t.Errorf("status %d: response %d, body %q (%v): want a problem body", status, resp.StatusCode, raw, err)
			continue
		}
		if resp.StatusCode != http.StatusInternalServerError || body.Status != http.StatusInternalServerError {
			t.Errorf("status %d: response %d with \"status\":%d in the body, want 500 in both", status, resp.StatusCode, body.Status)
		}
	}
}
