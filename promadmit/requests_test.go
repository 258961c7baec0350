package promadmit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_http_requests_total counts requests, not limits, by what the
// decision did with each: the 429s, the 503s and the requests served are
// read off it, where pgadmit_http_admissions_total counts a request
// admitted on three limits three times and one failed closed once per
// enforced limit failing closed. Every outcome is there from New on, so
// that increase counts a process's first 503.
func TestRequestsCountedOncePerRequest(t *testing.T) {
	t.Parallel()
	reg, metrics := newRegistered(t)
	const (
		metric = "pgadmit_http_requests_total"
		help   = "# HELP pgadmit_http_requests_total HTTP requests whose decision reached a limit, by outcome: admitted (served on a decision: every enforced limit fit), refused (an enforced limit refused: a 429), failed_open (the database failed: served without a decision), failed_closed (the database failed: refused, a 503); every outcome from 0.\n# TYPE pgadmit_http_requests_total counter\n"
	)
	want := func(admitted, refused, failedOpen, failedClosed string) {
		t.Helper()
		page := help +
			`pgadmit_http_requests_total{outcome="admitted"} ` + admitted + "\n" +
			`pgadmit_http_requests_total{outcome="failed_closed"} ` + failedClosed + "\n" +
			`pgadmit_http_requests_total{outcome="failed_open"} ` + failedOpen + "\n" +
			`pgadmit_http_requests_total{outcome="refused"} ` + refused + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(page), metric); err != nil {
			t.Error(err)
		}
	}
	want("0", "0", "0", "0") // before any request

	quiet := httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	serve := func(limiter *ratelimit.Limiter, onFailure httpadmit.FailurePolicy) *httptest.Server {
		t.Helper()
		mw, err := httpadmit.New(limiter, func(r *http.Request) ([]httpadmit.Limit, error) {
			key := "k-" + t.Name()
			return []httpadmit.Limit{
				{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricRequests,
					Limit: 2, Amount: 1, Window: ratelimit.MaxWindow}, OnFailure: onFailure},
				{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "model", Key: key}, Metric: ratelimit.MetricConcurrent,
					Limit: 5, Amount: 1}, OnFailure: onFailure},
				limit("team", key, ratelimit.MetricRequests, 1, 1, httpadmit.Shadow),
			}, nil
		}, httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(10*time.Second), quiet)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		t.Cleanup(srv.Close)
		return srv
	}
	get := func(srv *httptest.Server, status int) {
		t.Helper()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Fatalf("status %d, want %d", resp.StatusCode, status)
		}
	}

	// Three limits each: two served (the second shadow-refused), then a 429.
	up := serve(ratelimit.New(pgtest.NewPool(t)), httpadmit.FailClosed)
	get(up, http.StatusOK)
	get(up, http.StatusOK)
	get(up, http.StatusTooManyRequests)
	want("2", "1", "0", "0")

	// A database out of reach: two enforced limits fail closed, one 503.
	down := ratelimit.New(pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"))
	get(serve(down, httpadmit.FailClosed), http.StatusServiceUnavailable)
	get(serve(down, httpadmit.FailOpen), http.StatusOK)
	want("2", "1", "1", "1")

	// A caller of Decided: a request's outcomes, the precedence of the
	// middleware's (a refusal beside admissions is a refused request),
	// and no request for no outcomes; an outcome of no request is other.
	l := httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "t"}, Metric: "m"}}
	metrics.Decided([]httpadmit.LimitOutcome{{Limit: l, Outcome: httpadmit.OutcomeAdmitted}, {Limit: l, Outcome: httpadmit.OutcomeRefused}})
	metrics.Decided([]httpadmit.LimitOutcome{{Limit: l, Outcome: httpadmit.OutcomeShadowRefused}}) // served: shadow limits only
	metrics.Decided(nil)
	want("3", "2", "1", "1")
	metrics.Decided([]httpadmit.LimitOutcome{{Limit: l, Outcome: "bogus"}})
	if page := scrape(t, reg); !strings.Contains(page, "\n"+metric+`{outcome="`+promadmit.Other+`"} 1`+"\n") {
		t.Errorf("a request of no known outcome is not counted as other:\n%s", page)
	}
}
