package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
)

// Recover's search for open reservations and live leases of attempts no
// longer running starts from those that name an attempt (a partial index
// of live state) and probes each one's attempt, also on a generic plan,
// which PostgreSQL settles on after a few runs of a prepared statement.
// Unordered, the generic plan (its LIMIT unknown) read the whole table
// sequentially once open rows that name an attempt were a few percent of
// it, as they are where settled rows name their attempt too (a review saw
// 30 ms a batch with 2,000 open of 46,000 reservations), in every run,
// growing with the ledger.
func TestRecoverFindsRowsOfFinishedAttemptsThroughOpenRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := setup(t)
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	// Four open reservations and leases for each running attempt of the
	// fixture (200): 800 of about 10,800 rows of each table, 7 %; every
	// settled one names a finished attempt.
	const open = 4 * 200
	if err := testq.FixtureFillOpenOfRunning(ctx, pool, open/200); err != nil {
		t.Fatalf("FixtureFillOpenOfRunning: %v", err)
	}
	if err := testq.FixtureAttachSettledToFinishedAttempts(ctx, pool); err != nil {
		t.Fatalf("FixtureAttachSettledToFinishedAttempts: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	const batch = 500
	statements := map[string]func(tx pgx.Tx) error{
		"RecoveryReservationFindForFinishedAttempts": func(tx pgx.Tx) error {
			_, err := queries.RecoveryReservationFindForFinishedAttempts(ctx, tx, batch)
			return err
		},
		"RecoveryLeaseReleaseForFinishedAttempts": func(tx pgx.Tx) error {
			_, err := queries.RecoveryLeaseReleaseForFinishedAttempts(ctx, tx, db.RecoveryLeaseReleaseForFinishedAttemptsParams{BatchSize: batch})
			return err
		},
	}
	for name, run := range statements {
		for _, generic := range []bool{false, true} {
			for _, r := range planReads(t, pool, generic, run) {
				// The lease release may hash the batch with every unreleased
				// lease (its comment says so): live state twice, at most.
				if r.SeqScans > 0 || r.IndexEntriesRead > 2*open+16 {
					t.Errorf("%s (generic plan: %t) read %s: %d sequential scans, %d index entries; want its %d open rows and their attempts",
						name, generic, r.TableName, r.SeqScans, r.IndexEntriesRead, open)
				}
			}
		}
	}
}
