package httpadmit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A gateway in front of its upstream through httputil.ReverseProxy: a
// request the upstream could not serve (unreachable, or answering 5xx) is
// released, so the next request finds the same number left.
func ExampleDiscardOnProxyError() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	// A decision that times out is cancelled: ConfigurePool has the server
	// told, so that the statement's grant is not stranded until its window
	// ends or its lease expires.
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	limits := func(r *http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "key_proxy"},
			Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: 24 * time.Hour}}}, nil
	}
	admit, err := httpadmit.New(limiter, limits, httpadmit.WithDecisionTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	reverseProxy := func(upstream string) http.Handler {
		u, err := url.Parse(upstream)
		if err != nil {
			log.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(u)
		// The upstream could not be reached: release, and answer 502.
		proxy.ErrorHandler = httpadmit.DiscardOnProxyError(nil)
		// The upstream answered with an error of its own: release too.
		// Otherwise it took the request: report so, lest a client that
		// leaves before the end of the answer pay nothing (the middleware
		// releases a request whose client left before any report).
		proxy.ModifyResponse = func(res *http.Response) error {
			if res.StatusCode >= 500 {
				_ = httpadmit.Discard(res.Request.Context(), fmt.Sprintf("upstream_%d", res.StatusCode))
				return nil
			}
			_ = httpadmit.ReportUsage(res.Request.Context(), map[string]float64{ratelimit.MetricRequests: 1})
			return nil
		}
		return admit(proxy)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/overloaded" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer upstream.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more

	for _, c := range []struct {
		to   http.Handler
		path string
	}{{reverseProxy(upstream.URL), "/ok"}, {reverseProxy(gone.URL), "/ok"}, {reverseProxy(upstream.URL), "/overloaded"}, {reverseProxy(upstream.URL), "/ok"}} {
		rec := httptest.NewRecorder()
		c.to.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, c.path, nil))
		fmt.Println(rec.Code, "remaining on admission:", rec.Header().Get("x-ratelimit-remaining-requests"))
	}
	// Output:
	// 200 remaining on admission: 9
	// 502 remaining on admission: 8
	// 503 remaining on admission: 8
	// 200 remaining on admission: 8
}
