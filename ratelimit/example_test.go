package ratelimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// The README's quickstart: from DATABASE_URL to a request admitted and
// settled, and the housekeeping. From ctx on, this body is the README's
// block, line for line (TestReadmeShowsTheRunnableQuickstart): keep them
// the same.
func Example_quickstart() {
	defer setEnv("DATABASE_URL", pgtest.ExampleURL())() // the examples' database stands in for yours

	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg) // no grant stranded by a cancel; a session the server closed is replaced before use
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil { // idempotent; safe from many instances at once
		log.Fatal(err)
	}
	limiter := ratelimit.New(pool)
	defer limiter.Close() // runs before pool.Close: gives back what the Limiter holds

	apiKey := ratelimit.Scope{Type: "api_key", Key: "key_123"}
	model := ratelimit.Scope{Type: "model", Key: "gpt-4o"}
	grant, err := limiter.Reserve(ctx, "", "", []ratelimit.Limit{ // no task: task and attempt ids ""
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: 500}, // estimate
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 50, Amount: 1},
	})
	var exceeded *ratelimit.ExceededError
	if errors.As(err, &exceeded) {
		// A gateway answers 429 with Retry-After: exceeded.RetryAfter (the database's clock);
		// exceeded.Retryable is false when the amount can never fit.
		fmt.Println("refused:", exceeded.Message, exceeded.RetryAfter)
		return
	}
	if err != nil {
		log.Fatal(err)
	}

	// ... call the upstream ...

	settlement, err := limiter.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 420})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled, slots released:", settlement.LeasesReleased)

	// Housekeeping runs on a pool, never inside a transaction of yours: from one service on a
	// schedule (or `pgadmit recover --every 30s` and a daily `pgadmit prune`).
	maint := ratelimit.NewMaintenance(pool)
	recovered, err := maint.Recover(ctx) // single flight across processes
	if err != nil {
		log.Fatal(err)
	}
	pruned, err := maint.Prune(ctx, 24*time.Hour) // and finished tasks older than the task retention
	if err != nil {
		log.Fatal(err)
	}
	report, err := maint.Doctor(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("recovered anything:", !recovered.Zero(), "| finished tasks deleted:", pruned.Tasks)
	fmt.Println(report)
	// Output:
	// settled, slots released: 1
	// recovered anything: false | finished tasks deleted: 0
	// doctor: the books balance
}

// setEnv sets an environment variable until the function it returns is
// called. Examples run one at a time, after the tests.
func setEnv(name, value string) (restore func()) {
	old, had := os.LookupEnv(name)
	if err := os.Setenv(name, value); err != nil {
		log.Fatal(err)
	}
	return func() {
		if had {
			os.Setenv(name, old)
		} else {
			os.Unsetenv(name)
		}
	}
}

// A gateway request end to end: admit it against the API key's requests and
// tokens per minute and a concurrency slot on the model, call the upstream,
// then settle with the tokens really used. Commit releases the slot.
func ExampleLimiter_Reserve() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg) // no grant stranded by a cancel; a session the server closed is replaced before use
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close() // runs before pool.Close: gives back what the Limiter holds

	apiKey := ratelimit.Scope{Type: "api_key", Key: "key_123", Name: "Acme production"}
	model := ratelimit.Scope{Type: "model", Key: "gpt-4o"}
	limits := []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: 500}, // estimate
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 50, Amount: 1},
	}

	grant, err := limiter.Reserve(ctx, "", "", limits)
	if err != nil {
		log.Fatal(err) // see ExampleExceededError for turning a refusal into a 429
	}
	fmt.Printf("admitted: %d window reservations, %d lease\n", len(grant.Reservations), len(grant.Leases))

	usedTokens := 420.0 // what the upstream reported

	settlement, err := limiter.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: usedTokens})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range settlement.Reservations {
		fmt.Printf("%s: reserved %g, used %g\n", r.Metric, r.Reserved, r.Actual)
	}
	fmt.Println("slots released:", settlement.LeasesReleased)

	// Settling twice is a no-op that says so.
	again, err := limiter.Release(ctx, grant, "client_cancelled")
	fmt.Println("second settle was a no-op:", again.AlreadySettled(), err)
	// Output:
	// admitted: 2 window reservations, 1 lease
	// requests: reserved 1, used 1
	// tokens: reserved 500, used 420
	// slots released: 1
	// second settle was a no-op: true <nil>
}

// Turning a refusal into an HTTP 429 with Retry-After. The reset time and
// retry-after come from the database's clock, not the gateway host's.
func ExampleExceededError() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close() // runs before pool.Close: gives back what the Limiter holds

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scope is keyed by a digest of the API key, not the key: scope
		// keys are stored, shown and logged (the refusal's message names it).
		digest := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		limits := []ratelimit.Limit{{
			Scope:  ratelimit.Scope{Type: "api_key", Key: hex.EncodeToString(digest[:16])},
			Metric: ratelimit.MetricRequests, Limit: 2, Amount: 1, Window: 24 * time.Hour,
		}}
		grant, err := limiter.Reserve(r.Context(), "", "", limits)
		var exceeded *ratelimit.ExceededError
		switch {
		case errors.As(err, &exceeded) && exceeded.Retryable:
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(exceeded.RetryAfter.Seconds()))))
			http.Error(w, exceeded.Message, http.StatusTooManyRequests)
			return
		case errors.As(err, &exceeded): // can never fit: retrying will not help
			http.Error(w, exceeded.Message, http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "admission unavailable", http.StatusServiceUnavailable)
			return
		}
		// ... forward the request upstream, then settle:
		if _, err := limiter.Commit(r.Context(), grant, nil); err != nil {
			log.Print(err)
		}
		w.WriteHeader(http.StatusOK)
	})

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		req.Header.Set("Authorization", "key_429")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		retryAfter, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
		fmt.Println(rec.Code, "retry after at most a day:", retryAfter >= 1 && retryAfter <= 86400)
	}
	// Output:
	// 200 retry after at most a day: false
	// 200 retry after at most a day: false
	// 429 retry after at most a day: true
}

// Housekeeping, from one of your services on a schedule (or `pgadmit recover --every 30s` and a
// daily `pgadmit prune`): check that the pool suits its connection pooler, give back what dead
// processes hold, keep the tables bounded, and check the books.
func ExampleMaintenance() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // behind PgBouncer: add default_query_exec_mode=exec
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := ratelimit.CheckPooler(ctx, pool); err != nil {
		log.Fatal(err) // a *PoolerError says what to change in the connection string
	}
	maint := ratelimit.NewMaintenance(pool, ratelimit.WithTaskRetention(7*24*time.Hour))

	recovered, err := maint.Recover(ctx) // single flight: Skipped when another process runs it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("recovered anything:", !recovered.Zero())
	pruned, err := maint.Prune(ctx, 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("finished tasks deleted:", pruned.Tasks)
	report, err := maint.Doctor(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(report)
	// Output:
	// recovered anything: false
	// finished tasks deleted: 0
	// doctor: the books balance
}
