package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover's search for open reservations, live leases and running attempts
// of finished tasks reads the open ones (a partial index of live state) and probes each
// one's task, also on a generic plan, which PostgreSQL settles on after a
// few runs of a prepared statement. Ordered by id, the generic plan walked
// the primary key of the whole ledger instead, in id order, filtering out
// every settled row, in every batch of every run.
func TestRecoverFindsRowsOfFinishedTasksThroughOpenRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	// Running tasks, each holding a request: open rows with a task.
	for i := range 20 {
		task := startSync(t, l, time.Minute)
		limits := []ratelimit.Limit{
			window("api_key", fmt.Sprintf("running-%d", i), ratelimit.MetricTokens, 1e9, 500),
			concurrent("model", fmt.Sprintf("running-%d", i), 1e9),
		}
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); err != nil {
			t.Fatal(err)
		}
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	// The open rows: the fixture's 200 running tasks (with their attempts)
	// and the 20 above; a tenth of the fixture is far more than those.
	const batch = 500
	statements := map[string]func(tx pgx.Tx) error{
		"RecoveryReservationFindForFinishedTasks": func(tx pgx.Tx) error {
			_, err := queries.RecoveryReservationFindForFinishedTasks(ctx, tx, batch)
			return err
		},
		"RecoveryLeaseReleaseForFinishedTasks": func(tx pgx.Tx) error {
			_, err := queries.RecoveryLeaseReleaseForFinishedTasks(ctx, tx, db.RecoveryLeaseReleaseForFinishedTasksParams{BatchSize: batch})
			return err
		},
		"RecoveryAttemptFailForFinishedTasks": func(tx pgx.Tx) error {
			_, err := queries.RecoveryAttemptFailForFinishedTasks(ctx, tx, db.RecoveryAttemptFailForFinishedTasksParams{BatchSize: batch})
			return err
		},
	}
	for name, run := range statements {
		reads := tableReads(t, pool, func(tx pgx.Tx) error {
			if err := testq.PlanCacheForceGeneric(ctx, tx); err != nil {
				return err
			}
			return run(tx)
		})
		for _, r := range reads {
			if r.SeqScans > 0 || r.IndexEntriesRead > fixtureRows/10 {
				t.Errorf("%s on its generic plan read %s: %d sequential scans, %d index entries (of %d rows); want its open rows and their tasks",
					name, r.TableName, r.SeqScans, r.IndexEntriesRead, fixtureRows)
			}
		}
	}
}
