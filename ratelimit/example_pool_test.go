package ratelimit_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The recommended pool: ConfigurePool on the parsed config before the pool
// is made, so that a statement cancelled mid-flight never strands what it
// granted, and a connection whose session the server ended (a restart) is
// replaced before a statement is sent on it. Behind PgBouncer in transaction pooling mode, also use the exec
// mode "exec" (default_query_exec_mode=exec in the URL does the same);
// CheckPooler then tells whether the pool suits the proxy.
func ExampleConfigurePool() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // needed behind a transaction pooler only
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	fmt.Println("pooler check:", ratelimit.CheckPooler(ctx, pool)) // a *PoolerError says what to change

	limiter := ratelimit.New(pool)
	defer limiter.Close() // before pool.Close: deferred calls run last first
	grant, err := limiter.Reserve(ctx, "", "", []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "api_key", Key: "key_pool"},
		Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1,
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("admitted:", len(grant.Reservations), "reservation")
	if _, err := limiter.Commit(ctx, grant, nil); err != nil {
		log.Fatal(err)
	}
	// Output:
	// pooler check: <nil>
	// admitted: 1 reservation
}
