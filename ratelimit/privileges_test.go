package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// docs/privileges.sql grants two group roles what pgadmit needs: gateways
// every method of a Limiter (and Doctor, which only reads), maintenance
// Recover, Prune and Doctor. Every
// flow runs here as a login role of each group (two gateway instances, one
// sweeper): combined and hot batches, Local blocks, leases, tasks sync and
// async, a caller's transaction, and the state gateways leave behind
// (expired tasks and leases, open reservations), which maintenance then
// recovers and prunes to empty tables. A grant missing from the script
// fails a flow with insufficient_privilege (42501).
func TestLeastPrivilegeRolesRunEveryFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	owner := pgtest.OpenPool(t, dbURL)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, dbURL)
	gateways := limitersOn([]*pgxpool.Pool{pgtest.OpenPool(t, gatewayURL), pgtest.OpenPool(t, gatewayURL)})
	gatewayPool := pgtest.OpenPool(t, gatewayURL)
	gateway := ratelimit.New(gatewayPool)
	hot, team := uniqueKey("hot"), uniqueKey("team")
	hour := hourWindow(t, owner) // the Local limit's window (an hour or a few minutes more) does not end during the test
	var local atomic.Int64

	// Many workers at once on both instances: combined and hot batches,
	// Local blocks, queue places and sync tasks.
	hammer(t, gateways, func(l *ratelimit.Limiter, worker int) error {
		for i := range 4 {
			task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", QueueLimits: []ratelimit.Limit{queueLimit(team, 1000)}})
			if err != nil {
				return fmt.Errorf("CreateTask: %w", err)
			}
			grant, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
				window("api_key", hot, "requests", 1e6, 1), localWindow(hour, hot, 1e6, 10), concurrent("model", hot, 1000),
			})
			if err != nil {
				return fmt.Errorf("Reserve: %w", err)
			}
			if slices.ContainsFunc(grant.Reservations, func(r ratelimit.Reservation) bool { return r.Local }) {
				local.Add(1)
			}
			if (worker+i)%3 == 0 {
				_, err = l.Release(ctx, grant, "upstream_error")
			} else {
				_, err = l.Commit(ctx, grant, map[string]float64{"tokens": 7})
			}
			if err != nil {
				return fmt.Errorf("settle: %w", err)
			}
			if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
				return fmt.Errorf("FinishTask: %w", err)
			}
		}
		return nil
	})
	var hotBatches int64
	for _, l := range gateways {
		hotBatches += l.Stats().Reserve.Hot + l.Stats().Settle.Hot
		l.Close() // gives its Local blocks back
	}
	if hotBatches == 0 {
		t.Errorf("no hot batch was sent (pgadmit_hot_commit)")
	}
	if local.Load() == 0 {
		t.Errorf("no admission came from a Local block")
	}
	if open := openBlocks(t, owner, hot); len(open) != 0 {
		t.Errorf("%d block(s) still open after Close, want every one given back", len(open))
	}

	// The other methods of a Limiter, one by one.
	key := uniqueKey("key")
	limits := []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5)}
	must(t, "Check", gateway.Check(ctx, limits))
	grant := mustGet(t, "Reserve", func() (ratelimit.Grant, error) { return gateway.Reserve(ctx, "", "", limits) })
	mustGet(t, "RenewLeases", func() ([]ratelimit.Lease, error) { return gateway.RenewLeases(ctx, grant.Leases) })
	mustGet(t, "ReleaseLeases", func() (int, error) { return gateway.ReleaseLeases(ctx, grant.Leases, "done") })
	mustGet(t, "Release", func() (ratelimit.Settlement, error) { return gateway.Release(ctx, grant, "done") })
	var inTx ratelimit.Grant
	must(t, "Reserve in a caller's transaction", pgx.BeginFunc(ctx, gatewayPool, func(tx pgx.Tx) (err error) {
		inTx, err = gateway.WithTx(tx).Reserve(ctx, "", "", limits)
		return err
	}))
	mustGet(t, "Commit", func() (ratelimit.Settlement, error) {
		return gateway.Commit(ctx, inTx, map[string]float64{"tokens": 50})
	})

	async := mustGet(t, "CreateTask", func() (ratelimit.Task, error) {
		return gateway.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit(team, 1000)}})
	})
	claimed := mustGet(t, "ClaimTask", func() (ratelimit.Task, error) { return gateway.ClaimTask(ctx, "worker", time.Minute) })
	if claimed.ID != async.ID {
		t.Fatalf("ClaimTask claimed %s, want the task just created, %s", claimed.ID, async.ID)
	}
	mustGet(t, "HeartbeatTask", func() (time.Time, error) {
		return gateway.HeartbeatTask(ctx, claimed.ID, claimed.ExecutionToken, time.Minute)
	})
	mustGet(t, "AppendEvent", func() (ratelimit.Event, error) {
		return gateway.AppendEvent(ctx, claimed.ID, claimed.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 50})
	})
	taskless := mustGet(t, "Reserve", func() (ratelimit.Grant, error) { return gateway.Reserve(ctx, "", "", limits) })
	mustGet(t, "Attach", func() (ratelimit.Grant, error) { return gateway.Attach(ctx, claimed.AttemptID, taskless) })
	mustGet(t, "FinishTask", func() (ratelimit.FinishResult, error) {
		return gateway.FinishTask(ctx, claimed.ID, claimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	})
	mustGet(t, "GetTask", func() (ratelimit.Task, error) { return gateway.GetTask(ctx, claimed.ID) })
	mustGet(t, "TaskEvents", func() ([]ratelimit.Event, error) { return gateway.TaskEvents(ctx, claimed.ID) })
	mustGet(t, "TaskAttempts", func() ([]ratelimit.Attempt, error) { return gateway.TaskAttempts(ctx, claimed.ID) })
	queued := mustGet(t, "CreateTask", func() (ratelimit.Task, error) {
		return gateway.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit(team, 1000)}})
	})
	mustGet(t, "CancelTask", func() (ratelimit.FinishResult, error) { return gateway.CancelTask(ctx, queued.ID, "client_gone") })

	// What a gateway that dies leaves: a task whose claim expires with its
	// admission, a grant nobody settles, and a block it stopped reporting.
	lost := uniqueKey("lost")
	lostBlock(t, pgtest.OpenPool(t, gatewayURL), hourWindow(t, owner), lost)
	dying := mustGet(t, "CreateTask", func() (ratelimit.Task, error) {
		return gateway.CreateTask(ctx, ratelimit.TaskSpec{Worker: "dies", LeaseTTL: time.Second, QueueLimits: []ratelimit.Limit{queueLimit(team, 1000)}})
	})
	mustGet(t, "Reserve", func() (ratelimit.Grant, error) { return gateway.Reserve(ctx, dying.ID, dying.AttemptID, limits) })
	mustGet(t, "Reserve", func() (ratelimit.Grant, error) { return gateway.Reserve(ctx, "", "", limits) })
	gateway.Close()

	// Maintenance, hours later: everything comes back, then goes.
	var clock testClock
	clock.advance(3 * time.Hour)
	sweeper := ratelimit.NewMaintenance(pgtest.OpenPool(t, maintenanceURL),
		ratelimit.WithMaintenanceClock(clock.now), ratelimit.WithTaskRetention(time.Hour), ratelimit.WithPruneEvents(true))
	recovered := mustGet(t, "Recover", func() (ratelimit.RecoveryResult, error) { return sweeper.Recover(ctx) })
	if recovered.FailedTasks == 0 || recovered.ReleasedRateReservations == 0 || recovered.ReleasedConcurrencyLeases == 0 || recovered.ReturnedAllotments == 0 {
		t.Errorf("Recover = %+v, want the dead gateway's task failed, its reservations, leases and block given back", recovered)
	}
	clock.advance(3 * time.Hour) // past the retention of what Recover finished and released
	mustGet(t, "Prune", func() (ratelimit.PruneResult, error) { return sweeper.Prune(ctx, time.Hour) })
	report := mustGet(t, "Doctor", func() (ratelimit.Report, error) { return sweeper.Doctor(ctx) })
	if !report.OK() {
		t.Errorf("Doctor as the maintenance role:\n%s", report)
	}
	// Doctor only reads: a gateway's role may run it too, as docs/dba.md says.
	report = mustGet(t, "Doctor as the gateway's role", func() (ratelimit.Report, error) {
		return ratelimit.NewMaintenance(pgtest.OpenPool(t, gatewayURL)).Doctor(ctx)
	})
	if !report.OK() {
		t.Errorf("Doctor as the gateway's role:\n%s", report)
	}
	if left := rowCounts(t, owner); left != (dbtest.TableRowCountsRow{}) {
		t.Errorf("rows left after Recover and Prune as the maintenance role: %+v", left)
	}
	for _, key := range []string{hot, lost} {
		if blocks := allotments(t, owner, "model", key); len(blocks) != 0 {
			t.Errorf("%d block(s) of %s left after Prune as the maintenance role", len(blocks), key)
		}
	}
}

// must fails the test when what did returned err, naming a missing
// privilege as such.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		t.Fatalf("%s: a privilege docs/privileges.sql does not grant: %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

// mustGet returns what call returns, failing the test as must does.
func mustGet[T any](t *testing.T, what string, call func() (T, error)) T {
	t.Helper()
	v, err := call()
	must(t, what, err)
	return v
}
