package promadmit_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Against a stopped database, requests fail open or closed, every call is
// counted with result "error", and the registry passes promlint (names,
// units, _total on counters, help).
func TestStoppedDatabaseSeriesAndLint(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: connection refused
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	reg, metrics := newRegistered(t)
	registerCombining(t, reg, limiter)
	mw, err := httpadmit.New(limiter, func(r *http.Request) ([]httpadmit.Limit, error) {
		l := limit("api_key", r.Header.Get("Authorization"), ratelimit.MetricRequests, 5, 1, httpadmit.Enforce)
		if r.URL.Path == "/open" {
			l.OnFailure = httpadmit.FailOpen
		}
		return []httpadmit.Limit{l}, nil
	}, httpadmit.WithObserver(metrics), httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/closed"
			if i%2 == 0 {
				path = "/open"
			}
			req := httptest.NewRequest(http.MethodPost, path, nil)
			req.Header.Set("Authorization", "sk-secret")
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
	}
	wg.Wait()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgadmit_http_admissions_total Limits of HTTP requests decided, by outcome (admitted, refused, shadow_refused, failed_open, failed_closed), mode (enforce, shadow), scope type and metric.
# TYPE pgadmit_http_admissions_total counter
pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="failed_closed",scope_type="api_key"} 20
pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="failed_open",scope_type="api_key"} 20
`), "pgadmit_http_admissions_total"); err != nil {
		t.Error(err)
	}
	page := scrape(t, reg)
	if want := `pgadmit_db_operation_duration_seconds_count{operation="reserve",result="error"} 40`; !strings.Contains(page, want+"\n") {
		t.Errorf("/metrics lacks %s:\n%s", want, page)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
