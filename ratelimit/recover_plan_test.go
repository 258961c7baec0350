package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Recover's search for open reservations, live leases and running attempts
// of finished tasks reads the open ones (a partial index of live state) and probes each
// one's task, also on a generic plan, which PostgreSQL settles on after a
// few runs of a prepared statement. Ordered by id, the generic plan walked
// the primary key of the whole ledger instead, in id order, filtering out
// every settled row, in every batch of every run. The custom plans (the
// first five runs on a connection) of the searches of open reservations
// and live leases hashed a sequential scan of every task instead of
// probing each one's (a review saw it with 950 open reservations among
// 30,800 tasks): each now probes its task by a LATERAL with a LIMIT, as the
// search of attempts does.
func TestRecoverFindsRowsOfFinishedTasksThroughOpenRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	// A reservation and a lease for each running task of the fixture (200):
	// with the 20 below, about one live row to 45 tasks, which the custom
	// plans hashed.
	if err := testq.FixtureFillOpenOfRunning(ctx, pool, 1); err != nil {
		t.Fatalf("FixtureFillOpenOfRunning: %v", err)
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
		for _, generic := range []bool{false, true} {
			reads := planReads(t, pool, generic, run)
			for _, r := range reads {
				if r.SeqScans > 0 || r.IndexEntriesRead > fixtureRows/10 {
					t.Errorf("%s (generic plan: %t) read %s: %d sequential scans, %d index entries (of %d rows); want its open rows and their tasks",
						name, generic, r.TableName, r.SeqScans, r.IndexEntriesRead, fixtureRows)
				}
			}
		}
	}
}

// Recover's page of queue admissions that deletes those of finished tasks
// (a foreign writer finished them) deletes them by key: the delete was a
// hash join of the page's doomed rows with every admission, read by a
// sequential scan, in each page holding one. Admissions are one per
// unfinished task and queue scope: with a backlog of queued tasks, a pass
// that met a doomed row in every page read the table once per page.
func TestRecoverDeletesAdmissionsOfFinishedTasksByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const backlog, batch = 20_000, 100
	if err := testq.FixtureFillQueue(ctx, pool, backlog); err != nil {
		t.Fatalf("FixtureFillQueue: %v", err)
	}
	// The first page's first task, finished by hand: its admissions are
	// doomed.
	first := pgtype.UUID{Valid: true}
	tableReads(t, pool, func(tx pgx.Tx) error { // rolled back: a read
		row, err := queries.RecoveryAdmissionDeleteForFinishedTasks(ctx, tx, db.RecoveryAdmissionDeleteForFinishedTasksParams{
			AfterTaskID: pgtype.UUID{Valid: true}, BatchSize: 1,
		})
		first = row.LastTaskID
		return err
	})
	if n, err := testq.OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{TaskID: first, Status: ratelimit.TaskSucceeded}); err != nil || n != 1 {
		t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	for _, generic := range []bool{false, true} {
		var row db.RecoveryAdmissionDeleteForFinishedTasksRow
		reads := planReads(t, pool, generic, func(tx pgx.Tx) error {
			var err error
			row, err = queries.RecoveryAdmissionDeleteForFinishedTasks(ctx, tx, db.RecoveryAdmissionDeleteForFinishedTasksParams{
				AfterTaskID: pgtype.UUID{Valid: true}, BatchSize: batch,
			})
			return err
		})
		if row.Scanned != batch || row.Deleted != 1 {
			t.Fatalf("a page (generic plan: %t) read %d admissions and deleted %d, want %d and 1", generic, row.Scanned, row.Deleted, batch)
		}
		for _, r := range reads {
			if r.SeqScans > 0 || r.IndexEntriesRead > 3*batch {
				t.Errorf("a page of %d (generic plan: %t) read %s: %d sequential scans, %d index entries; want its page",
					batch, generic, r.TableName, r.SeqScans, r.IndexEntriesRead)
			}
		}
	}
}
