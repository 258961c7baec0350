package ratelimit_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// CheckPooler finds the mismatch and says what to change; the modes that keep no session state,
// and direct connections, pass.
func TestCheckPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, directURL := pgtest.NewPoolerURL(t)
	check := func(url string, mode pgx.QueryExecMode) error {
		t.Helper()
		return ratelimit.CheckPooler(ctx, poolsOn(t, url, 1, mode)[0])
	}
	for mode, name := range map[pgx.QueryExecMode]string{
		pgx.QueryExecModeCacheStatement: "cache_statement", pgx.QueryExecModeDescribeExec: "describe_exec",
	} {
		err := check(pooled, mode)
		var mismatch *ratelimit.PoolerError
		if !errors.As(err, &mismatch) || !errors.Is(err, ratelimit.ErrPoolerMismatch) || mismatch.Mode != name {
			t.Fatalf("CheckPooler(%s behind PgBouncer) = %v, want a *PoolerError", mode, err)
		}
		for _, advice := range []string{"default_query_exec_mode=exec", "max_prepared_statements"} {
			if !strings.Contains(err.Error(), advice) {
				t.Errorf("the error does not say %q: %v", advice, err)
			}
		}
		if err := check(directURL, mode); err != nil {
			t.Errorf("CheckPooler(%s, direct) = %v, want nil", mode, err)
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol} {
		if err := check(pooled, mode); err != nil {
			t.Errorf("CheckPooler(%s behind PgBouncer) = %v, want nil", mode, err)
		}
	}
}

// poolsOn opens n pools on url executing statements in mode, closed when t ends.
func poolsOn(t *testing.T, url string, n int, mode pgx.QueryExecMode) []*pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		if pools[i], err = pgxpool.NewWithConfig(context.Background(), cfg.Copy()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pools[i].Close)
	}
	return pools
}

// What the issue saw behind PgBouncer, done right: migrations from four instances at once, and
// recoveries from four instances while others admit, all through the pooler; every expired task
// is recovered exactly once, no advisory lock or lease is left behind on any server session,
// and a recovery on a direct connection afterwards is not skipped.
func TestMigrateAndRecoverBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, directURL := pgtest.NewPoolerURL(t)
	pools := poolsOn(t, pooled, 4, pgx.QueryExecModeExec)
	direct := poolsOn(t, directURL, 1, pgx.QueryExecModeCacheStatement)[0]

	if err := schema.Down(ctx, pools[0]); err != nil {
		t.Fatalf("Down through PgBouncer: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(pools)+goroutines)
	for _, pool := range pools {
		wg.Go(func() { errs <- schema.Migrate(ctx, pool) })
	}
	wg.Wait()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := schema.Version(ctx, direct); err != nil || v != int64(len(names)) {
		t.Fatalf("version after migrating through PgBouncer = %d, %v", v, err)
	}

	var clock testClock
	l, _ := clocked(pools[0], &clock)
	const tasks = 40
	var expiry time.Time
	for range tasks {
		expiry = latest(expiry, startSync(t, l, time.Second).LeaseExpiresAt)
	}
	clock.pass(expiry)
	results := make([]ratelimit.RecoveryResult, 3*len(pools))
	for i := range results {
		wg.Go(func() {
			_, m := clocked(pools[i%len(pools)], &clock, ratelimit.WithRecoveryBatchSize(3))
			var err error
			results[i], err = m.Recover(ctx)
			errs <- err
		})
	}
	key := uniqueKey("k")
	for w := range goroutines / 4 {
		wg.Go(func() {
			lw := ratelimit.New(pools[w%len(pools)])
			g, err := lw.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 1e6, 1), concurrent("model", key, 1e6)})
			if err == nil {
				_, err = lw.Commit(ctx, g, nil)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("through PgBouncer: %v", err)
		}
	}
	var failed int64
	for _, r := range results {
		failed += r.FailedTasks
	}
	if failed != tasks {
		t.Fatalf("recoveries failed %d tasks in all, want each of the %d exactly once: %+v", failed, tasks, results)
	}
	if locks, err := testq.AdvisoryLocksHeld(ctx, direct); err != nil || len(locks) != 0 {
		t.Fatalf("advisory locks held on server sessions: %+v, %v", locks, err)
	}
	if leases := maintenanceLeases(t, direct); len(leases) != 0 {
		t.Fatalf("maintenance leases left: %v", leases)
	}
	recoverOnce(t, ratelimit.NewMaintenance(direct), ratelimit.RecoveryResult{})
	assertDoctorOK(t, direct)
}
