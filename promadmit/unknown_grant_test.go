package promadmit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A request whose reservation the database no longer knows when it is
// settled (Prune released and deleted it while the request ran) is counted
// as unknown_grant, for a Commit and for a Release: ratelimit reports it in
// the Settlement (StatusUnknown), not as an error, and it used to count as
// ok, out of sight of a gateway alerting on grants it lost.
func TestSettleOfAPrunedGrantIsUnknownGrant(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	reg, metrics := newRegistered(t)
	key := "unknown-" + time.Now().Format("150405.000000000")
	mw, err := httpadmit.New(ratelimit.New(pool), func(*http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key},
			Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Second}}}, nil
	}, httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(10*time.Second), httpadmit.WithSettleTimeout(10*time.Second),
		httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	// Two requests hold their reservations until Prune has run: one is
	// committed, the other discarded (released).
	resets := make(chan time.Time, 2)
	pruned := make(chan struct{})
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, _ := httpadmit.GrantFrom(r.Context())
		if len(g.Reservations) != 1 {
			t.Errorf("grant %+v, want one reservation", g)
			resets <- time.Now()
			return
		}
		resets <- g.Reservations[0].ResetAt
		<-pruned
		if r.URL.Path == "/discard" {
			_ = httpadmit.Discard(r.Context(), "upstream_failed")
		}
	}))
	var wg sync.WaitGroup
	for _, path := range []string{"/commit", "/discard"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
		}()
	}
	end := <-resets
	if other := <-resets; other.After(end) {
		end = other
	}
	time.Sleep(time.Until(end) + 100*time.Millisecond) // both windows over
	res, err := ratelimit.NewMaintenance(pool).Prune(context.Background(), time.Millisecond)
	close(pruned)
	wg.Wait()
	if err != nil || res.Reservations < 2 {
		t.Fatalf("Prune = %+v, %v; want both reservations deleted", res, err)
	}
	page := scrape(t, reg)
	for _, op := range []string{httpadmit.OpCommit, httpadmit.OpRelease} {
		want := `pgadmit_db_operation_duration_seconds_count{operation="` + op + `",result="` + promadmit.ResultUnknownGrant + `"} 1`
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, page)
		}
	}
}
