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

// A preflight: Check says whether the window limits would fit now, without
// taking anything, so it may run as often as needed. Only Reserve takes.
func ExampleLimiter_Check() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	limits := []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "api_key", Key: "key_check"},
		Metric: ratelimit.MetricRequests, Limit: 1, Amount: 1, Window: 24 * time.Hour,
	}}
	fmt.Println("check:", limiter.Check(ctx, limits))
	fmt.Println("check again:", limiter.Check(ctx, limits)) // nothing was taken

	if _, err := limiter.Reserve(ctx, "", "", limits); err != nil {
		log.Fatal(err)
	}
	err = limiter.Check(ctx, limits)
	var exceeded *ratelimit.ExceededError
	if errors.As(err, &exceeded) {
		fmt.Printf("check after reserve: refused, %s %g of %g taken, retryable %t\n",
			exceeded.Metric, exceeded.Current, exceeded.Limit, exceeded.Retryable)
	}
	// Output:
	// check: <nil>
	// check again: <nil>
	// check after reserve: refused, requests 1 of 1 taken, retryable true
}

// Settling with what the upstream really used: Commit charges the actual
// tokens in place of the estimate, and an actual above it is charged in full
// and reported as an overage.
func ExampleLimiter_Commit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	apiKey := ratelimit.Scope{Type: "api_key", Key: "key_commit"}
	limits := []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: 500}, // estimate: max_tokens
	}
	for _, used := range []float64{420, 650} {
		grant, err := limiter.Reserve(ctx, "", "", limits)
		if err != nil {
			log.Fatal(err)
		}
		// ... call the upstream; it reports the tokens it used ...

		// Metrics left out of the map (requests here) are charged their estimate.
		settlement, err := limiter.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: used})
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range settlement.Reservations {
			fmt.Printf("%s: %s, reserved %g, charged %g\n", r.Metric, r.Status, r.Reserved, r.Actual)
		}
		for _, o := range settlement.Overages() {
			fmt.Printf("over the estimate: %s by %g\n", o.Metric, o.Overage())
		}
	}
	// Output:
	// requests: committed, reserved 1, charged 1
	// tokens: committed, reserved 500, charged 420
	// requests: committed, reserved 1, charged 1
	// tokens: committed, reserved 500, charged 650
	// over the estimate: tokens by 150
}

// Giving everything back unused: the upstream failed before doing any work,
// so the request is released, not charged, and its capacity is free again.
func ExampleLimiter_Release() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "key_release"},
			Metric: ratelimit.MetricTokens, Limit: 1000, Amount: 1000, Window: 24 * time.Hour},
		{Scope: ratelimit.Scope{Type: "model", Key: "gpt-4o-release"},
			Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1},
	}
	grant, err := limiter.Reserve(ctx, "", "", limits)
	if err != nil {
		log.Fatal(err)
	}
	// ... the upstream answers 502 ...
	settlement, err := limiter.Release(ctx, grant, "upstream_error")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(settlement.Reservations[0].Metric, settlement.Reservations[0].Status,
		"| slots released:", settlement.LeasesReleased)

	// The whole window and the slot are free again: the retry fits.
	grant, err = limiter.Reserve(ctx, "", "", limits)
	fmt.Println("retry admitted:", err == nil)
	if _, err := limiter.Release(ctx, grant, "example_done"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// tokens released | slots released: 1
	// retry admitted: true
}
