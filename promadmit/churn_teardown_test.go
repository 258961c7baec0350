package promadmit_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/leakcheck"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A gateway serves a churn of distinct API keys through the middleware,
// with its metrics and its Limiter's combining collector: requests
// committed, discarded, cut off by their client, and long enough to renew
// their leases. No series of the metrics carries a key, and once the server
// is shut down, the Limiter closed and the collectors unregistered, no
// goroutine of pgadmit is left running (a lease renewal, a give-back).
//
// Not parallel: it counts the process's goroutines.
func TestKeyChurnThroughTheMiddlewareLeavesNoSeriesOfKeysNorGoroutines(t *testing.T) {
	before := leakcheck.Snapshot()
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: 50 * time.Millisecond}))
	reg := prometheus.NewRegistry()
	metrics, err := promadmit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	combining, err := promadmit.NewCombiningCollector(limiter)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(combining)

	prefix := fmt.Sprintf("churnkey%d", time.Now().UnixNano())
	limits := func(r *http.Request) ([]httpadmit.Limit, error) {
		key := r.Header.Get("X-Key")
		tokens := httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key},
			Metric: ratelimit.MetricTokens, Limit: 1e9, Amount: 10, Window: time.Second}}
		tokens.Local = true
		return []httpadmit.Limit{tokens,
			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key},
				Metric: ratelimit.MetricRequests, Limit: 1e9, Amount: 1, Window: time.Second}},
			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key},
				Metric: ratelimit.MetricConcurrent, Limit: 10, Amount: 1, LeaseTTL: 3 * time.Second}},
			{Mode: httpadmit.Shadow, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "route", Key: prefix},
				Metric: ratelimit.MetricRequests, Limit: 1, Amount: 1, Window: time.Second}},
		}, nil
	}
	mw, err := httpadmit.New(limiter, limits, httpadmit.WithObserver(metrics),
		httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Kind") {
		case "long": // its leases are renewed every second (a third of their TTL) meanwhile
			time.Sleep(1100 * time.Millisecond)
		case "discard":
			_ = httpadmit.Discard(r.Context(), "upstream_failed")
			w.WriteHeader(http.StatusBadGateway)
			return
		case "leave":
			<-r.Context().Done()
			return
		}
		_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 7})
		_, _ = io.WriteString(w, "ok")
	})
	server := httptest.NewServer(mw(app))
	client := server.Client()

	kinds := []string{"ok", "ok", "ok", "ok", "ok", "long", "discard", "discard", "leave", "leave"}
	const workers, churn, minRequests = 8, 3 * time.Second, 100
	var next, served atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for stop := time.Now().Add(churn); time.Now().Before(stop) || next.Load() < minRequests; {
				i := next.Add(1)
				kind := kinds[i%int64(len(kinds))]
				ctx, cancel := context.WithCancel(context.Background())
				if kind == "leave" {
					time.AfterFunc(20*time.Millisecond, cancel)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL, nil)
				if err != nil {
					t.Error(err)
					cancel()
					return
				}
				req.Header.Set("X-Key", fmt.Sprintf("%s-%d", prefix, i))
				req.Header.Set("X-Kind", kind)
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						served.Add(1)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests, %d served; %+v", next.Load(), served.Load(), limiter.Stats())
	if served.Load() == 0 {
		t.Fatal("no request was served: nothing was churned")
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			series++
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), prefix) {
					t.Errorf("%s{%s=%q}: a label carries a scope key", f.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	// What New makes from the start (60 operation counters, 15 kinds) and
	// the few outcomes, modes, pairs and results of this traffic: none per key.
	if series > 150 {
		t.Errorf("%d series after %d requests on as many keys", series, next.Load())
	}

	server.Close() // waits for the requests in flight
	client.CloseIdleConnections()
	limiter.Close()
	reg.Unregister(metrics)
	reg.Unregister(combining)
	leakcheck.AwaitNone(t, before, 3*time.Second)
}
