package httpadmit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// WithCommitAfterHeader(true): a client that leaves once the handler sent
// its response's status, before any report, has its request committed at
// its estimate, the upstream having answered; one that leaves before the
// handler sent anything still pays nothing, as without the option, and so
// does one whose handler calls Discard. Without the option (false, the
// default), the request is released (TestClientCancels).
func TestCommitAfterHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		on, header  bool
		discard     bool
		requests    float64 // used after the client left
		tokens      float64
		wantRelease bool
	}{
		{name: "on, header sent", on: true, header: true, requests: 1, tokens: 1000},
		{name: "on, nothing sent", on: true, wantRelease: true},
		{name: "on, header sent, Discard", on: true, header: true, discard: true, wantRelease: true},
		{name: "off, header sent", header: true, wantRelease: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("after-header")
			mw := e.middleware(fixed(
				window("api_key", key, ratelimit.MetricRequests, 100, 1),
				window("api_key", key, ratelimit.MetricTokens, 10_000, 1000),
				concurrent("model", key, 2),
			), httpadmit.WithCommitAfterHeader(c.on))
			started := make(chan struct{})
			handlerDone := make(chan error, 1)
			srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.discard {
					_ = httpadmit.Discard(r.Context(), "upstream_failed")
				}
				if c.header {
					_, _ = io.WriteString(w, "data: first\n\n")
					http.NewResponseController(w).Flush()
				}
				close(started)
				select { // the upstream keeps streaming until the client is gone
				case <-r.Context().Done():
					handlerDone <- nil
				case <-time.After(10 * time.Second):
					handlerDone <- errors.New("the client's cancellation never reached the handler")
				}
			})))
			defer srv.Close()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			got := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- err
					return
				}
				defer resp.Body.Close()
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if line != "data: first\n" {
					err = fmt.Errorf("first line %q: %w", line, err)
				}
				got <- err
			}()
			<-started
			if c.header {
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			if err := <-handlerDone; err != nil {
				t.Fatal(err)
			}
			e.nothingHeld()
			if b := e.books("api_key", key, ratelimit.MetricRequests); b != (book{Used: c.requests}) {
				t.Errorf("requests = %+v, want used %v", b, c.requests)
			}
			if b := e.books("api_key", key, ratelimit.MetricTokens); b != (book{Used: c.tokens}) {
				t.Errorf("tokens = %+v, want used %v", b, c.tokens)
			}
			calls := e.obs.callCounts()
			if c.wantRelease && (calls["release ok"] != 1 || calls["commit ok"] != 0) ||
				!c.wantRelease && (calls["commit ok"] != 1 || calls["release ok"] != 0) {
				t.Errorf("database calls %v, want one %s", calls, map[bool]string{true: "release", false: "commit"}[c.wantRelease])
			}
		})
	}
}
