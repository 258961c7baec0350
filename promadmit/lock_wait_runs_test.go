package promadmit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/errwalk"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Recover or Prune run that met only other sessions' locks past
// WithMaintenanceLockTimeout (every error of the run a
// *ratelimit.LockWaitError) is counted once, with result lock_wait, as
// the HELP of pgadmit_db_operation_duration_seconds and the README say:
// whether it could not take its lease, left batches in several steps (their
// errors joined), or could not give its lease up. Never error, which an
// alert on the database's health pages for.
func TestMaintenanceLockWaitsCountedOncePerRunAsLockWait(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	q := dbtest.New()
	pool := pgtest.NewPool(t)
	reg, m := newRegistered(t)
	ctx := context.Background()
	hold := func(lock func(context.Context, dbtest.DBTX) error) (release func()) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(ctx) }
	}
	runs := func(mt *ratelimit.Maintenance) map[string]error {
		_, recoverErr := m.Recover(ctx, mt)
		_, pruneErr := m.Prune(ctx, mt, time.Second)
		return map[string]error{promadmit.OpRecover: recoverErr, promadmit.OpPrune: pruneErr}
	}
	// onlyLockWaits checks that a run's error is what the case provokes:
	// at least want *ratelimit.LockWaitError, and nothing else.
	onlyLockWaits := func(what string, errs map[string]error, want int) {
		t.Helper()
		for op, err := range errs {
			n := 0
			errwalk.Each(err, func(*ratelimit.LockWaitError) { n++ })
			if n < want || !ratelimit.OnlyLockWaits(err) {
				t.Fatalf("%s: %s: %v (%d lock waits), want only lock waits, at least %d", what, op, err, n, want)
			}
		}
	}

	// The lease's take gives up: a migration holds the leases table.
	release := hold(q.OpsLockMaintenanceLeases)
	onlyLockWaits("lease take", runs(ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(bound))), 1)
	release()
	wantRuns(t, reg, "after runs whose lease take gave up", 1)

	// Batches left in several steps, their errors joined: a migration holds
	// the tables of tasks, counters and maintenance cursors.
	release = hold(func(ctx context.Context, tx dbtest.DBTX) error {
		for _, lock := range []func(context.Context, dbtest.DBTX) error{q.OpsLockTasks, q.OpsLockCounters, q.OpsLockMaintenanceCursors} {
			if err := lock(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
	onlyLockWaits("steps", runs(ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(bound))), 2)
	release()
	wantRuns(t, reg, "after runs that left batches in several steps", 2)

	// The lease's release gives up: the leases table is taken once the run
	// has its lease (the renewal is not due for 20 s).
	var mu sync.Mutex
	var held []func()
	report := func(ratelimit.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if len(held) == 0 {
			held = append(held, hold(q.OpsLockMaintenanceLeases))
		}
	}
	mt := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceLockTimeout(bound),
		ratelimit.WithMaintenanceLeaseTTL(time.Minute), ratelimit.WithProgress(0, report))
	_, err := m.Recover(ctx, mt)
	onlyLockWaits("lease release", map[string]error{promadmit.OpRecover: err}, 1)
	mu.Lock()
	held[0]()
	held = nil
	mu.Unlock()
	_, err = m.Prune(ctx, mt, time.Second)
	onlyLockWaits("lease release", map[string]error{promadmit.OpPrune: err}, 1)
	held[0]()
	wantRuns(t, reg, "after runs whose lease release gave up", 3)
}

// wantRuns checks that Recover and Prune were each counted n times, every
// one lock_wait, in pgadmit_db_operations_total and in the histogram.
func wantRuns(t *testing.T, reg *prometheus.Registry, when string, n float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := counterValues(families)
	for _, op := range []string{promadmit.OpRecover, promadmit.OpPrune} {
		for _, name := range []string{"pgadmit_db_operations_total", "pgadmit_db_operation_duration_seconds"} {
			var all float64
			for series, count := range v {
				if strings.HasPrefix(series, name+"/"+op+"/") {
					all += count
				}
			}
			if got := v[name+"/"+op+"/"+promadmit.ResultLockWait]; got != n || all != n {
				t.Errorf("%s: %s{operation=%q}: %g lock_wait of %g, want %g of %g", when, name, op, got, all, n, n)
			}
		}
	}
}
