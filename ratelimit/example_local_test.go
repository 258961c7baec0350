package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local limit is admitted from a block of its window that the Limiter
// takes in advance (an allotment), in memory, with no round trip once the
// block is held; the block's units are reserved in the window's counter, so
// the limit stays exact across processes. Close returns the blocks and
// charges what they admitted; call it before closing the pool.
func ExampleLimit_local() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{
		MaxShare: 1.0 / 8, // a block holds at most an eighth of the limit (default 1/16)
	}))

	limits := []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "api_key", Key: "key_local"},
		Metric: ratelimit.MetricRequests, Limit: 10_000, Amount: 1, Window: time.Hour,
		Local: true,
	}}
	for range 3 {
		grant, err := limiter.Reserve(ctx, "", "", limits)
		if err != nil {
			log.Fatal(err)
		}
		r := grant.Reservations[0]
		fmt.Println("from a block:", r.Local, "| row written:", r.ID != "")
		settlement, err := limiter.Commit(ctx, grant, nil) // in memory
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("committed:", settlement.Reservations[0].Status)
	}
	// Blocks are taken, reported and returned in the background: Stats says
	// what came of it (a role without its grants on the allotments table
	// would show failures here, and its Local limits decided in the database).
	local := limiter.Stats().Local
	fmt.Println("blocks granted:", local.Granted, "| block statements failed:", local.Failed)
	fmt.Println("admitted from blocks:", local.FromBlocks, "| decided in the database:", local.InDatabase)

	limiter.Close() // returns the block: the counter now holds the 3 requests as used
	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(report)
	// Output:
	// from a block: true | row written: false
	// committed: committed
	// from a block: true | row written: false
	// committed: committed
	// from a block: true | row written: false
	// committed: committed
	// blocks granted: 1 | block statements failed: 0
	// admitted from blocks: 3 | decided in the database: 0
	// doctor: the books balance
}
