package httpadmit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The database hangs while an admitted request runs: the end of its
// response, which net/http sends once the middleware returns, waits for the
// Commit, and so for WithSettleTimeout, as the package documentation says:
// no less (the settle is not skipped) and not much more (nothing else
// waits for the frozen server).
func TestHangAfterAdmissionHoldsTheResponseForTheSettleTimeout(t *testing.T) {
	t.Parallel()
	const settle = 400 * time.Millisecond
	e := setup(t)
	f, pool := freezer.NewPool(t, e.pool.Config(), nil)
	e.limiter = ratelimit.New(pool)
	key := uniqueKey("key")
	// Timed from the freeze, not from the request: its admission (a first
	// connection dialled, a Reserve) is no part of the bound, and can take
	// much of a second on a loaded machine.
	frozen := make(chan time.Time, 1)
	srv := httptest.NewServer(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)),
		httpadmit.WithSettleTimeout(settle))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
			f.Freeze() // the database hangs once the answer is written
			frozen <- time.Now()
		})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	end := time.Now()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("got %d %q, %v; want 200 \"ok\\n\"", resp.StatusCode, body, err)
	}
	took := end.Sub(<-frozen) // the handler ran: it wrote the body
	if took < settle || took > settle+time.Second {
		t.Errorf("the response took %s to reach the client once the database hung; want the settle timeout (%s), and at most a second more",
			took.Round(time.Millisecond), settle)
	}
}
