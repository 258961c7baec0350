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

// Admission inside a transaction of yours: the reservation commits or rolls
// back with your own writes. Operations that share the transaction must come
// in the global lock order (Reserve then CreateTask, not Reserve twice); one
// out of order is refused before it runs.
func ExampleLimiter_WithTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	limits := []ratelimit.Limit{{
		Scope:  ratelimit.Scope{Type: "api_key", Key: "key_tx"},
		Metric: ratelimit.MetricRequests, Limit: 1, Amount: 1, Window: 24 * time.Hour,
	}}
	var grant ratelimit.Grant
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx) // READ COMMITTED, the default
		if err != nil {
			log.Fatal(err)
		}
		txLimiter := limiter.WithTx(tx) // one per transaction: it keeps the lock order
		grant, err = txLimiter.Reserve(ctx, "", "", limits)
		if err != nil {
			log.Fatal(err)
		}
		// ... your own writes on tx ...
		_, err = txLimiter.Reserve(ctx, "", "", limits) // a second Reserve could deadlock
		fmt.Println("second Reserve in the transaction refused:", errors.Is(err, ratelimit.ErrLockOrder))
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx) // the reservation goes with it
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("committed:", commit, "| window full:", errors.Is(limiter.Check(ctx, limits), ratelimit.ErrExceeded))
	}

	// The committed grant is settled as any other, in or out of a transaction.
	if _, err := limiter.Commit(ctx, grant, nil); err != nil {
		log.Fatal(err)
	}
	// Output:
	// second Reserve in the transaction refused: true
	// committed: false | window full: false
	// second Reserve in the transaction refused: true
	// committed: true | window full: true
}
