package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// fixtureRows is how many rows FixtureFill puts in each table: enough that
// the planner prefers an index wherever one serves the statement.
const fixtureRows = 10_000

// Every hot-path flow (admission, settling, leases, tasks, recovery, prune)
// reads the tables through indexes, never a sequential scan, on tables of
// realistic size. This is the EXPLAIN test without EXPLAIN text in Go: each
// flow runs in a transaction whose own scan counters (the functions behind
// pg_stat_xact_user_tables) are read before and after it, then rolls back.
func TestHotPathsUseIndexes(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	if err := testq.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := testq.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	counts := rowCounts(t, pool)
	if counts.Counters < fixtureRows || counts.Reservations < fixtureRows || counts.Leases < fixtureRows || counts.Tasks < fixtureRows {
		t.Fatalf("fixture too small: %+v", counts)
	}

	limits := []ratelimit.Limit{
		window("fixture_key", "k7", "tokens", 1e9, 500),
		window("fixture_key", "k8", "requests", 1e9, 1),
		concurrent("fixture_model", "m3", 1e6),
	}
	held, err := l.Reserve(ctx, "", "", limits) // settled by the flows below, each in a rolled-back tx
	if err != nil {
		t.Fatal(err)
	}
	flows := map[string]func(tx *ratelimit.Limiter) error{
		"Reserve": func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", limits); return err },
		"Check":   func(l *ratelimit.Limiter) error { return l.Check(ctx, limits) },
		"Commit": func(l *ratelimit.Limiter) error {
			_, err := l.Commit(ctx, held, map[string]float64{"tokens": 420})
			return err
		},
		"Release": func(l *ratelimit.Limiter) error { _, err := l.Release(ctx, held, "test"); return err },
		// Combined batches: of gateway requests (pgadmit_reserve), of
		// one-window requests (pgadmit_reserve_windows), and of one-window
		// requests that do not fit whole (it hands them to pgadmit_reserve).
		"ReserveBatch": func(l *ratelimit.Limiter) error {
			return reserveBatch(ctx, l, limits, limits)
		},
		"ReserveBatchOneWindow": func(l *ratelimit.Limiter) error {
			return reserveBatch(ctx, l, limits[:1], limits[1:2])
		},
		"ReserveBatchOneWindowOverLimit": func(l *ratelimit.Limiter) error {
			full := []ratelimit.Limit{window("fixture_key", "k9", "requests", 1, 1)}
			return reserveBatch(ctx, l, full, full)
		},
		"RenewLeases":   func(l *ratelimit.Limiter) error { _, err := l.RenewLeases(ctx, held.Leases); return err },
		"ReleaseLeases": func(l *ratelimit.Limiter) error { _, err := l.ReleaseLeases(ctx, held.Leases, "test"); return err },
	}
	// Task lifecycle: a queued async task to claim, a sync one to finish.
	if _, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true}); err != nil {
		t.Fatal(err)
	}
	running, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "plans"})
	if err != nil {
		t.Fatal(err)
	}
	queue := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "fixture_queue", Key: "q5"}, Metric: ratelimit.MetricQueueSize, Limit: 1e6}}
	flows["CreateTask"] = func(l *ratelimit.Limiter) error {
		_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: queue})
		return err
	}
	flows["ClaimTask"] = func(l *ratelimit.Limiter) error { _, err := l.ClaimTask(ctx, "plans", time.Minute); return err }
	flows["HeartbeatTask"] = func(l *ratelimit.Limiter) error {
		_, err := l.HeartbeatTask(ctx, running.ID, running.ExecutionToken, time.Minute)
		return err
	}
	flows["FinishTask"] = func(l *ratelimit.Limiter) error {
		_, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		return err
	}
	// A queued task holding a queue place and what was reserved for it
	// while it waits, cancelled by its owner.
	waiting, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: queue})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, waiting.ID, "", limits); err != nil {
		t.Fatal(err)
	}
	flows["CancelTask"] = func(l *ratelimit.Limiter) error {
		res, err := l.CancelTask(ctx, waiting.ID, "plans")
		if err == nil && (res.ReleasedReservations != 2 || res.ReleasedLeases != 1 || res.DeletedAdmissions != 1) {
			err = fmt.Errorf("CancelTask released %+v, want 2 reservations, 1 lease, 1 admission", res)
		}
		return err
	}
	flows["AppendEvent"] = func(l *ratelimit.Limiter) error {
		_, err := l.AppendEvent(ctx, running.ID, running.ExecutionToken, ratelimit.Event{Type: "task.progress"})
		return err
	}
	attachable, err := l.Reserve(ctx, running.ID, "", limits)
	if err != nil {
		t.Fatal(err)
	}
	flows["Attach"] = func(l *ratelimit.Limiter) error { _, err := l.Attach(ctx, running.AttemptID, attachable); return err }
	// Recovery and prune run their own transactions; their statements are
	// checked one by one inside the test's.
	const batch = 500
	statements := map[string]func(tx pgx.Tx) error{
		"RecoveryTaskFindExpired": func(tx pgx.Tx) error {
			_, err := queries.RecoveryTaskFindExpired(ctx, tx, db.RecoveryTaskFindExpiredParams{BatchSize: batch})
			return err
		},
		"RecoveryReservationFindForFinishedTasks": func(tx pgx.Tx) error {
			_, err := queries.RecoveryReservationFindForFinishedTasks(ctx, tx, batch)
			return err
		},
		"RecoveryTaskReclaim": func(tx pgx.Tx) error {
			_, err := queries.RecoveryTaskReclaim(ctx, tx, db.RecoveryTaskReclaimParams{MaxRequeues: 5, TaskIds: []pgtype.UUID{mustUUID(t, running.ID)}})
			return err
		},
		"RecoveryLeaseReleaseExpired": func(tx pgx.Tx) error {
			_, err := queries.RecoveryLeaseReleaseExpired(ctx, tx, db.RecoveryLeaseReleaseExpiredParams{BatchSize: batch})
			return err
		},
		"PruneReservationFindStale": func(tx pgx.Tx) error {
			_, err := queries.PruneReservationFindStale(ctx, tx, db.PruneReservationFindStaleParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
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
		"RecoveryReservationFindForFinishedAttempts": func(tx pgx.Tx) error {
			_, err := queries.RecoveryReservationFindForFinishedAttempts(ctx, tx, batch)
			return err
		},
		"RecoveryLeaseReleaseForFinishedAttempts": func(tx pgx.Tx) error {
			_, err := queries.RecoveryLeaseReleaseForFinishedAttempts(ctx, tx, db.RecoveryLeaseReleaseForFinishedAttemptsParams{BatchSize: batch})
			return err
		},
		"RecoveryAdmissionDeleteForFinishedTasks": func(tx pgx.Tx) error {
			_, err := queries.RecoveryAdmissionDeleteForFinishedTasks(ctx, tx, db.RecoveryAdmissionDeleteForFinishedTasksParams{
				AfterTaskID: pgtype.UUID{Valid: true}, BatchSize: batch,
			})
			return err
		},
		"PruneCounters": func(tx pgx.Tx) error {
			_, err := queries.PruneCounters(ctx, tx, db.PruneCountersParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
			return err
		},
		"PruneReservationNextWindowLength": func(tx pgx.Tx) error {
			_, err := queries.PruneReservationNextWindowLength(ctx, tx, 0)
			return err
		},
		"PruneReservations": func(tx pgx.Tx) error {
			_, err := queries.PruneReservations(ctx, tx, db.PruneReservationsParams{
				WindowSeconds: 60, StartsBefore: dayAgo(t, tx).Add(-time.Minute), AfterID: pgtype.UUID{Valid: true}, BatchSize: batch,
			})
			return err
		},
		"PruneLeasesReleased": func(tx pgx.Tx) error {
			_, err := queries.PruneLeasesReleased(ctx, tx, db.PruneLeasesReleasedParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
			return err
		},
		"PruneLeasesExpired": func(tx pgx.Tx) error {
			_, err := queries.PruneLeasesExpired(ctx, tx, db.PruneLeasesExpiredParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
			return err
		},
		"PruneEvents": func(tx pgx.Tx) error {
			_, err := queries.PruneEvents(ctx, tx, db.PruneEventsParams{Cutoff: dayAgo(t, tx), AfterID: pgtype.UUID{Valid: true}, BatchSize: batch})
			return err
		},
		// Tasks that finished more than a day ago, with everything that
		// refers to them: the cascades and SET NULLs of the foreign keys
		// must find their rows through indexes too.
		"PruneTasks": func(tx pgx.Tx) error {
			n, err := queries.PruneTasks(ctx, tx, db.PruneTasksParams{Cutoff: dayAgo(t, tx), BatchSize: batch})
			if err == nil && n == 0 {
				err = errors.New("deleted no task: the fixture has none finished a day ago")
			}
			return err
		},
	}
	for name, flow := range flows {
		statements[name] = func(tx pgx.Tx) error { return flow(l.WithTx(tx)) }
	}
	for name, run := range statements {
		scans := scansOf(t, pool, run)
		for _, s := range scans {
			if s.SeqScans > 0 {
				t.Errorf("%s: %d sequential scan(s) of %s", name, s.SeqScans, s.TableName)
			}
		}
		t.Logf("%s: %+v", name, scans)
	}
}

// reserveBatch reserves the given requests in one combined call; a refusal
// is an outcome, not an error.
func reserveBatch(ctx context.Context, l *ratelimit.Limiter, requests ...[]ratelimit.Limit) error {
	reqs := make([]ratelimit.BatchRequest, len(requests))
	for i, limits := range requests {
		reqs[i] = ratelimit.BatchRequest{Limits: limits}
	}
	_, errs, err := l.ReserveCombined(ctx, reqs)
	for _, e := range errs {
		if e != nil && !errors.Is(e, ratelimit.ErrExceeded) {
			return e
		}
	}
	return err
}

// dayAgo is the database's now() minus a day: a prune cutoff.
func dayAgo(t *testing.T, tx pgx.Tx) time.Time {
	t.Helper()
	cutoff, err := queries.PruneCutoff(context.Background(), tx, db.PruneCutoffParams{OlderThanSeconds: 24 * 3600})
	if err != nil {
		t.Fatal(err)
	}
	return cutoff
}

// scansOf runs fn in a transaction that it rolls back, and returns how fn
// read each table it read.
func scansOf(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) []scanCount {
	t.Helper()
	var out []scanCount
	for _, r := range tableReads(t, pool, fn) {
		if r.SeqScans > 0 || r.IndexScans > 0 {
			out = append(out, scanCount{r.TableName, r.SeqScans, r.IndexScans})
		}
	}
	return out
}

type scanCount struct {
	TableName  string
	SeqScans   int64
	IndexScans int64
}
