package ratelimit_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Warm the pool at start-up, before the first request: each connection
// the pool may hold is then open and has prepared and run the statements
// a request of these kinds runs (Reserve, Commit); nothing was counted.
func ExampleLimiter_Warm() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 3
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	// The kinds of limits of your requests: their keys do not matter (Warm
	// uses keys of its own), their types, metrics and windows do.
	key := ratelimit.Scope{Type: "api_key", Key: "any"}
	kinds := []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 60, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 20000, Amount: 1},
	}
	warmed, err := limiter.Warm(ctx, kinds)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("connections warmed:", warmed, "| open:", pool.Stat().TotalConns())
	// Output:
	// connections warmed: 3 | open: 3
}
