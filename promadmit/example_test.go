package promadmit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Metrics observe the HTTP middleware: pass them to httpadmit.New with
// WithObserver, and serve the registry (promhttp.HandlerFor) on /metrics.
// Here two requests fit a quota of two per day and the third is refused;
// the admissions are counted per limit, labelled by scope type and metric,
// never by scope key.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	reg := prometheus.NewRegistry()
	metrics, err := promadmit.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	limits := func(r *http.Request) ([]httpadmit.Limit, error) {
		// Keyed by a digest of the API key, not the key: scope keys are stored and shown.
		digest := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		return []httpadmit.Limit{{Limit: ratelimit.Limit{
			Scope:  ratelimit.Scope{Type: "api_key", Key: hex.EncodeToString(digest[:16])},
			Metric: ratelimit.MetricRequests, Limit: 2, Amount: 1, Window: 24 * time.Hour,
		}}}, nil
	}
	admit, err := httpadmit.New(limiter, limits, httpadmit.WithObserver(metrics),
		httpadmit.WithDecisionTimeout(2*time.Second)) // a cold test database; the default is 250 ms
	if err != nil {
		log.Fatal(err)
	}
	handler := admit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		req.Header.Set("Authorization", "key_promadmit")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}

	families, err := reg.Gather() // what /metrics would serve
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "pgadmit_http_admissions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fmt.Printf("%s %s/%s %s: %g\n", f.GetName(), labels["scope_type"], labels["metric"],
				labels["outcome"], m.GetCounter().GetValue())
		}
	}
	// Output:
	// 200
	// 200
	// 429
	// pgadmit_http_admissions_total api_key/requests admitted: 2
	// pgadmit_http_admissions_total api_key/requests refused: 1
}
