package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover's release of expired leases and Prune's delete of them find the
// batch by reading every unreleased lease (no index serves expires_at
// alone, by choice: see queries/recovery.sql), but they read them once. The
// batch was joined back to the table with IN (subquery): the generic plan,
// and Prune's custom one, hashed it with a second read of every unreleased
// lease, which doubled the cost of each batch (with 50,000 live leases and
// 100 expired, 22 ms for Recover's generic plan, 16 ms once the batch is
// probed by primary key). The batch is now an array, probed by primary key.
func TestExpiredLeasesReadLiveLeasesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil { // released history
		t.Fatalf("FixtureFill: %v", err)
	}
	// Live leases that expire in an hour: 25 per running task of the fixture.
	const perTask = 25
	if err := testq.FixtureFillOpenOfRunning(ctx, pool, perTask); err != nil {
		t.Fatalf("FixtureFillOpenOfRunning: %v", err)
	}
	live := fixtureRows / 50 * perTask
	// A few that expire in two minutes (DefaultLeaseTTL): expired at the
	// @now below, half an hour on.
	const expiring = 10
	for range expiring {
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", uniqueKey("expiring"), 10)}); err != nil {
			t.Fatal(err)
		}
	}
	live += expiring
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	later := time.Now().Add(30 * time.Minute)
	statements := map[string]func(tx pgx.Tx) (int64, error){
		"RecoveryLeaseReleaseExpired": func(tx pgx.Tx) (int64, error) {
			return queries.RecoveryLeaseReleaseExpired(ctx, tx, db.RecoveryLeaseReleaseExpiredParams{BatchSize: 500, Now: &later})
		},
		"PruneLeasesExpired": func(tx pgx.Tx) (int64, error) {
			return queries.PruneLeasesExpired(ctx, tx, db.PruneLeasesExpiredParams{Cutoff: later, BatchSize: 5000})
		},
	}
	for name, run := range statements {
		for _, generic := range []bool{false, true} {
			var n int64
			reads := planReads(t, pool, generic, func(tx pgx.Tx) error {
				var err error
				n, err = run(tx)
				return err
			})
			if n != expiring {
				t.Fatalf("%s (generic plan: %t) = %d rows, want %d", name, generic, n, expiring)
			}
			for _, r := range reads {
				if r.TableName != "gateway_concurrency_leases" {
					continue
				}
				// Once through the live leases, and a few entries per row of the batch.
				if r.SeqScans > 0 || r.IndexEntriesRead > int64(live)+10*expiring {
					t.Errorf("%s (generic plan: %t) read %d index entries of the leases (%d sequential scans), %d of them live: more than once through them",
						name, generic, r.IndexEntriesRead, r.SeqScans, live)
				}
			}
		}
	}
}
