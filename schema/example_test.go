package schema_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// A service migrates at start-up with the pgx pool it already has. Migrate
// is idempotent and safe from many instances at once: one applies what is
// pending while the others wait for its lock row, then find nothing to do.
func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		log.Fatal(fmt.Errorf("migrate pgadmit: %w", err))
	}

	statuses, err := schema.Status(ctx, pool) // reads the version table only, without the lock
	if err != nil {
		log.Fatal(err)
	}
	pending := 0
	for _, s := range statuses {
		if s.State == goose.StatePending {
			pending++
		}
	}
	fmt.Println("pending migrations:", pending)
	// Output:
	// pending migrations: 0
}

// goose's Provider API on a database/sql handle, for tools that drive goose
// themselves (a CLI with goose.WithVerbose, say). The provider keeps pgadmit's
// own version and lock tables; options that would change them are refused.
func ExampleNewProvider() {
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.ExampleURL()) // your DATABASE_URL
	if err != nil {
		log.Fatal(err)
	}
	provider, err := schema.NewProvider(db)
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close() // closes db too

	results, err := provider.Up(ctx) // what it applied: nothing on a current schema
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied now:", len(results))
	pending, err := provider.HasPending(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", pending)

	_, err = schema.NewProvider(db, goose.WithTableName("goose_db_version"))
	fmt.Println("another version table refused:", err != nil)
	// Output:
	// applied now: 0
	// pending: false
	// another version table refused: true
}
