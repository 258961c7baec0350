package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// A migrator waiting for another one's lock row whose database takes no new
// connection for a while (a server, or a pooler in front of it, too busy to:
// each new one waits out its connect timeout), and ends the connections the
// locker tries on, keeps trying until its context ends, as it does after a
// lost connection, and migrates once the database answers again and the lock
// row is free. It gave up at the first connect timeout. (goose takes the
// connection it migrates on once the row is taken: see
// TestMigrateOutlivesARestartWhileItWaitsForTheLock.)
func TestMigrateWaitsOutAConnectTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewEmptyURL(t)

	// Another migrator holds the lock row, on a pool of its own.
	otherPool, unlock := pgtest.AnotherMigrator(t, ctx, url)

	// This one goes through a proxy, with a short connect timeout: a second, which a
	// connection through the proxy meets with room to spare once the database answers again
	// (300 ms did not, once, under a loaded CI: the release of the lock row timed out).
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	f, pool := freezer.NewPool(t, cfg, func(cfg *pgxpool.Config) { cfg.ConnConfig.ConnectTimeout = time.Second })
	tries := f.Watch("ON CONFLICT (lock_id)") // the locker's statement taking the lock row
	migrated := make(chan error, 1)
	go func() { migrated <- schema.Migrate(ctx, pool) }()
	select {
	case <-tries.Sent():
	case err := <-migrated:
		t.Fatalf("Migrate behind another migrator's lock row returned %v", err)
	}

	// Two connection attempts give up (the locker's try for the lock row, and
	// its cleanup of stale rows, each open one), then the database answers
	// again and the other migrator lets go.
	f.Hold()
	for f.Unanswered() < 2 {
		tries.Drop()
		select {
		case err := <-migrated:
			t.Fatalf("Migrate gave up while its database was unreachable: %v; want it to keep trying until its context ends", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	f.Thaw()
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate once its database answered again and the lock row was free: %v", err)
	}
	assertState(t, otherPool, migrationCount(t))
}
