package promadmit_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The combining collector reads Limiter.Stats at each scrape: here one
// Reserve and its Commit, each a statement of one call. Register it beside
// the Metrics of New, on the registry /metrics serves.
func ExampleNewCombiningCollector() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	reg := prometheus.NewRegistry()
	collector, err := promadmit.NewCombiningCollector(limiter)
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Register(collector); err != nil {
		log.Fatal(err)
	}

	grant, err := limiter.Reserve(ctx, "", "", []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "api_key", Key: "key_combining"},
		Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Hour,
	}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Commit(ctx, grant, nil); err != nil {
		log.Fatal(err)
	}

	families, err := reg.Gather() // what /metrics would serve
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		if name != "pgadmit_combined_statements_total" && name != "pgadmit_combined_calls_total" && name != "pgadmit_lost_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Printf("%s{%s} %g\n", name, strings.Join(labels, ","), m.GetCounter().GetValue())
		}
	}
	// Output:
	// pgadmit_combined_calls_total{kind="reserve"} 1
	// pgadmit_combined_calls_total{kind="settle"} 1
	// pgadmit_combined_statements_total{kind="reserve"} 1
	// pgadmit_combined_statements_total{kind="settle"} 1
	// pgadmit_lost_total{} 0
}
