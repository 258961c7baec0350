package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A concurrency limit: each admitted request holds a lease on a slot of the
// model until it is settled, or until the lease lapses if its process dies.
// A call that runs longer than the lease's TTL renews it as a heartbeat.
func ExampleLimiter_RenewLeases() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	limits := []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "model", Key: "gpt-4o-leases"},
		Metric: ratelimit.MetricConcurrent, Limit: 2, Amount: 1,
		LeaseTTL: 30 * time.Second, // renew well within it: every 10 s, say
	}}
	first, err := limiter.Reserve(ctx, "", "", limits)
	if err != nil {
		log.Fatal(err)
	}
	second, err := limiter.Reserve(ctx, "", "", limits)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("slots left:", second.Leases[0].Remaining)
	_, err = limiter.Reserve(ctx, "", "", limits)
	var exceeded *ratelimit.ExceededError
	if errors.As(err, &exceeded) {
		fmt.Printf("third refused: %g of %g slots in use\n", exceeded.Current, exceeded.Limit)
	}

	// A long upstream call keeps its slot with a heartbeat.
	renewed, err := limiter.RenewLeases(ctx, first.Leases)
	if errors.Is(err, ratelimit.ErrLeaseLost) {
		log.Fatal("the slot lapsed: stop the call") // a *LeaseLostError names the lost leases
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("renewed by:", renewed[0].TTL)

	// Settling releases the slots (Commit too).
	for _, g := range []ratelimit.Grant{first, second} {
		s, err := limiter.Release(ctx, g, "done")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("slots released:", s.LeasesReleased)
	}
	// Output:
	// slots left: 0
	// third refused: 2 of 2 slots in use
	// renewed by: 30s
	// slots released: 1
	// slots released: 1
}
