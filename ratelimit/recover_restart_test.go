package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A database restarting under a Recover or Prune run refuses new sessions
// with an error of its own ("the database system is starting up", 57P03):
// a server's error, but about the connection, not about the step's rows.
// The run stops at the first such failure, and returns that one error (and
// its lease's release's, which fails the same way). It
// used to take it for a step the server rejected and go on with every next
// step, each failing the same way, so that a sweeper logged one failure per
// step for one restart. Here the pool's sessions go after the first batch,
// and every new one is refused by the server (a database that is not there,
// 3D000, stands in for one that is starting up).
func TestMaintenanceStopsWhenTheServerRefusesSessions(t *testing.T) {
	t.Parallel()
	for _, job := range []string{"recover", "prune"} {
		t.Run(job, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, refuse := refusingPool(t)
			var err error
			batches := 0
			m := ratelimit.NewMaintenance(pool, ratelimit.WithProgress(0, func(ratelimit.Progress) {
				batches++
				if batches == 1 { // the server restarts
					refuse.Store(true)
					pool.Reset()
				}
			}))
			if job == "recover" {
				_, err = m.Recover(ctx)
			} else {
				_, err = m.Prune(ctx, 1)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
				t.Fatalf("%s = %v, want the server's refusal (3D000)", job, err)
			}
			// Besides the step's failure, the run says that it could not give
			// its lease up either (it failed for the same reason).
			steps, release := 0, 0
			for _, line := range strings.Split(err.Error(), "\n") {
				switch {
				case strings.Contains(line, "release the "+job+" lease: failed to connect"):
					release++
				case strings.Contains(line, "failed to connect"):
					steps++
				}
			}
			if steps != 1 || release != 1 {
				t.Errorf("%s: %d steps and %d lease releases failed, want one each and a stop:\n%v", job, steps, release, err)
			}
			if batches != 1 {
				t.Errorf("%s did %d batches, want 1", job, batches)
			}
		})
	}
}

// A run whose database went away mid-run cannot give its lease up; the next
// run of the same Maintenance takes it back at once rather than skipping,
// as if another process held it, until it expires. Another Maintenance
// (another process) still skips.
func TestMaintenanceTakesBackTheLeaseItsRunLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, refuse := refusingPool(t)
	once := false
	m := ratelimit.NewMaintenance(pool, ratelimit.WithProgress(0, func(ratelimit.Progress) {
		if !once { // the database goes away after the first batch
			once = true
			refuse.Store(true)
			pool.Reset()
		}
	}))
	if _, err := m.Recover(ctx); err == nil {
		t.Fatal("Recover with its database gone succeeded")
	}
	refuse.Store(false) // the database is back
	if leases := maintenanceLeases(t, pool); len(leases) != 1 {
		t.Fatalf("leases after the failed run: %v, want the one it left", leases)
	}
	if res, err := ratelimit.NewMaintenance(pool).Recover(ctx); err != nil || !res.Skipped {
		t.Fatalf("another Maintenance's Recover = %+v, %v; want skipped", res, err)
	}
	if res, err := m.Recover(ctx); err != nil || res.Skipped {
		t.Fatalf("the next run = %+v, %v; want it done, not skipped", res, err)
	}
	if leases := maintenanceLeases(t, pool); len(leases) != 0 {
		t.Fatalf("leases after the next run: %v, want none", leases)
	}
}

// refusingPool is a pool on a test database whose new sessions the server
// refuses (a database that is not there, 3D000) while the returned flag is
// set, as a server that is starting up refuses them; pool.Reset drops the
// sessions it has.
func refusingPool(t *testing.T) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	refuse := new(atomic.Bool)
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		if refuse.Load() {
			cc.Database = "pgadmit_no_such_database"
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, refuse
}
