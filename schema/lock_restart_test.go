package schema_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// A migrator waiting for another one's lock row whose server restarts meanwhile migrates once
// the row is free, as docs/cli.md's migrate section says of a lost connection. It failed once it
// took the row: goose took the connection it migrates on before it waited, and that connection
// was gone.
func TestMigrateOutlivesARestartWhileItWaitsForTheLock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Restarted below after a crash: durable, so that what was committed before (the version
	// table that Migrate created) is still there.
	c := pgtest.OwnCluster(t, pgcluster.OnDisk())
	// The other migrator's heartbeat runs until the test ends.
	_, unlock := pgtest.AnotherMigrator(t, ctx, c.URL())

	// This migrator goes through a proxy, which shows when it tries for the lock row.
	cfg, err := pgxpool.ParseConfig(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	f := freezer.New(t, net.JoinHostPort(pgcluster.Host, strconv.Itoa(c.Port())))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", f.Port()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tries := f.Watch("ON CONFLICT (lock_id)") // the locker's statement taking the lock row
	migrated := make(chan error, 1)
	go func() { migrated <- schema.Migrate(ctx, pool) }()
	select {
	case <-tries.Sent():
	case err := <-migrated:
		t.Fatalf("Migrate behind another migrator's lock row returned %v", err)
	}

	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unlock(); err != nil {
		t.Fatalf("the other migrator gives the lock row up after the restart: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate once the lock row was free after a restart: %v", err)
	}
	assertState(t, pool, migrationCount(t))
}
