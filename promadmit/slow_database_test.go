package promadmit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A database that holds Reserve past the decision timeout (its counters
// locked, as a migration would) is result timeout, with pgx's default
// cancel and with ConfigurePool's (where the server answers 57014).
func TestSlowDatabaseIsTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for name, configure := range map[string]bool{"pgx default": false, "ConfigurePool": true} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			if configure {
				ratelimit.ConfigurePool(cfg)
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			reg, metrics := newRegistered(t)
			limiter := ratelimit.New(pool)
			limits := func(*http.Request) ([]httpadmit.Limit, error) {
				return []httpadmit.Limit{limit("api_key", "k-"+name, ratelimit.MetricRequests, 100, 1, httpadmit.Enforce)}, nil
			}
			quiet := httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
			mw, err := httpadmit.New(limiter, limits, httpadmit.WithObserver(metrics),
				httpadmit.WithDecisionTimeout(100*time.Millisecond), quiet)
			if err != nil {
				t.Fatal(err)
			}
			// The warm-up goes through the same limiter and pool with a
			// decision timeout of its own, long enough for a loaded machine:
			// under load with -race, connecting and preparing can take longer
			// than the 100 ms under test, and than the default 250 ms too
			// (the warm-up got a 503 in a loaded run of the whole package).
			warmMW, err := httpadmit.New(limiter, limits, httpadmit.WithDecisionTimeout(30*time.Second), quiet)
			if err != nil {
				t.Fatal(err)
			}
			serveWith := func(mw func(http.Handler) http.Handler) int {
				rec := httptest.NewRecorder()
				mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).
					ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
				return rec.Code
			}
			serve := func() int { return serveWith(mw) }
			for range 3 { // warm: connections made, statements prepared
				if code := serveWith(warmMW); code != http.StatusOK {
					t.Fatalf("warm-up: %d", code)
				}
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := dbtest.New().OpsLockCounters(ctx, tx); err != nil {
				t.Fatal(err)
			}
			code := serve()
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if code != http.StatusServiceUnavailable {
				t.Errorf("with the counters locked: %d, want 503", code)
			}
			page := scrape(t, reg)
			if want := `pgadmit_db_operation_duration_seconds_count{operation="reserve",result="timeout"} 1`; !strings.Contains(page, want+"\n") {
				t.Errorf("/metrics lacks %s:\n%s", want, page)
			}
		})
	}
}
