package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Recover cut off by its context while its last step's statement waits
// for a row lock ends with the context's error, on a pool set up with
// ConfigurePool too: there the server answers the cancel request with
// SQLSTATE 57014, an error the server raised, and the steps that runSteps
// goes on past such an error had all run, so that error alone came back
// (promadmit then labelled the run "error", not "timeout", and the
// sweeper's log said "canceling statement due to user request").
func TestRecoverCutOffInItsLastStepOnAConfiguredPoolReturnsTheContextsError(t *testing.T) {
	t.Parallel()
	base := pgtest.NewPool(t)
	configured, _ := slowDials(t, base, 0, ratelimit.ConfigurePool)

	// A holder that stopped reporting: its block is lost once the
	// maintenance clock passes its end and the grace.
	key := uniqueKey("lost")
	hour := hourWindow(t, base) // one length for the block and the counter row below: they meet on one row
	_, lost := lostBlock(t, base, hour, key)
	var clock testClock
	clock.pass(lost)

	// Returning the block (the last step) waits for its counter's row lock.
	blocker, err := base.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocker.Rollback(context.Background()) })
	onCounter := localWindow(hour, key, 1000, 1)
	onCounter.Local = false
	if _, err := ratelimit.New(base).WithTx(blocker).Reserve(context.Background(), "", "", []ratelimit.Limit{onCounter}); err != nil {
		t.Fatal(err)
	}

	for name, pool := range map[string]*pgxpool.Pool{"pgx's default": base, "ConfigurePool": configured} {
		m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res, err := m.Recover(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Recover cut off in its last step: %+v, %v; want context.DeadlineExceeded", name, res, err)
		}
	}
}

// A RenewLeases cut off by its context while it waits for a lease's row
// lock ends with the context's error on a pool set up with ConfigurePool
// too, where the server answers the cancel request with 57014: it used to
// return that error alone, which no errors.Is of the context's matched.
func TestRenewLeasesCutOffOnAConfiguredPoolReturnsTheContextsError(t *testing.T) {
	t.Parallel()
	base := pgtest.NewPool(t)
	configured, _ := slowDials(t, base, 0, ratelimit.ConfigurePool)
	key := uniqueKey("k")
	g, err := ratelimit.New(base).Reserve(context.Background(), "", "", []ratelimit.Limit{concurrent("key", key, 10)})
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := base.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocker.Rollback(context.Background()) })
	if _, err := ratelimit.New(base).WithTx(blocker).RenewLeases(context.Background(), g.Leases); err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string]*pgxpool.Pool{"pgx's default": base, "ConfigurePool": configured} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := ratelimit.New(pool).RenewLeases(ctx, g.Leases)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: RenewLeases cut off behind a lock: %v; want context.DeadlineExceeded", name, err)
		}
	}
}
