package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A session keeps the plans of pgadmit's functions for its whole life, and
// a plan is chosen for the tables as they are when it is first built:
// empty, on a new database. Admitting and settling must still probe their
// own rows by key once thousands of requests are in flight, not read every
// open reservation or live lease (which the partial indexes of live rows
// would offer a plan built on empty tables). One connection plans every
// flow on empty tables, then holds open grants, then runs each flow in a
// rolled-back transaction, counting the index entries it read.
func TestHotPathsReadOnlyTheirRowsAsTablesGrow(t *testing.T) {
	t.Parallel()
	hotPathsReadOnlyTheirRows(t, plannedOnEmptyTables)
}

// The same after a VACUUM at a quiet moment: with nothing open, it records
// the partial indexes of open reservations and live leases as empty, and
// every plan made until the next one believes it, whatever the index holds
// by then. A probe that also tests the status would read every open row.
func TestHotPathsReadOnlyTheirRowsAfterAQuietVacuum(t *testing.T) {
	t.Parallel()
	hotPathsReadOnlyTheirRows(t, vacuumedQuiet)
}

// The same once the tables have grown and been analyzed, as autovacuum
// does after a burst of work: every plan is made again on statistics that
// count hundreds of running tasks and attempts and thousands of live
// rows, and a join of a few rows to one of those tables may then be
// planned as a scan of all of it (RecoveryTaskReclaim's attempts did, on
// a throwaway cluster whose autovacuum ran mid-test).
func TestHotPathsReadOnlyTheirRowsOnceAnalyzedGrown(t *testing.T) {
	t.Parallel()
	hotPathsReadOnlyTheirRows(t, analyzedGrown)
}

// statsMoment is when a hot-paths test's plans were made: on empty tables,
// after a vacuum at a quiet moment, or after an analyze of grown tables.
type statsMoment int

const (
	plannedOnEmptyTables statsMoment = iota
	vacuumedQuiet
	analyzedGrown
)

func hotPathsReadOnlyTheirRows(t *testing.T, moment statsMoment) {
	ctx := context.Background()
	// The plans built on empty tables are the ones measured. Commits do not
	// wait for their flush to disk (on a server with fsync on, most of the
	// test's time): the plans, and what they read, are the same.
	pool := oneSessionPoolOn(t, withoutCommitFlush(t, pgtest.NewURL(t)))
	l := ratelimit.New(pool, ratelimit.WithoutCombining())

	// The shape of a gateway request. Its model is its key's: counting the
	// live leases of a scope reads each of them, and this test is about
	// reading other requests' rows.
	request := func(key string) []ratelimit.Limit {
		return []ratelimit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 1e9, 1),
			window("api_key", key, ratelimit.MetricTokens, 1e9, 500),
			concurrent("model", key, 1e9),
		}
	}
	single := func(key string) []ratelimit.Limit {
		return []ratelimit.Limit{window("api_key", key, ratelimit.MetricRequests, 1e9, 1)}
	}
	reserve := func(limits []ratelimit.Limit) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	flows := map[string]func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error{
		"Reserve": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			_, err := l.Reserve(ctx, "", "", limits)
			return err
		},
		"ReserveBatch": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			return reserveBatch(ctx, l, limits, limits)
		},
		"Commit": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			_, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 420})
			return err
		},
		"Release": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			_, err := l.Release(ctx, g, "test")
			return err
		},
		"RenewLeases": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			_, err := l.RenewLeases(ctx, g.Leases)
			return err
		},
		"ReleaseLeases": func(l *ratelimit.Limiter, limits []ratelimit.Limit, g ratelimit.Grant) error {
			_, err := l.ReleaseLeases(ctx, g.Leases, "test")
			return err
		},
	}
	// The flows of a task, on a new running task: Attach of a grant to its
	// attempt, a heartbeat and an event (fenced by the token: they probe the
	// task row by key, not through the partial index of running tasks),
	// then FinishTask with a reservation of the task's own open. Attach and
	// FinishTask lock the counters of open reservations
	// (CounterLockForReservations) before they settle. each is called with
	// every flow, named.
	taskFlows := func(limits func(string) []ratelimit.Limit, each func(name string, run func(l *ratelimit.Limiter) error)) {
		task := startSync(t, l, time.Minute)
		g := reserve(limits(uniqueKey("unattached")))
		each("Attach", func(l *ratelimit.Limiter) error { _, err := l.Attach(ctx, task.AttemptID, g); return err })
		each("HeartbeatTask", func(l *ratelimit.Limiter) error {
			_, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
			return err
		})
		each("AppendEvent", func(l *ratelimit.Limiter) error {
			_, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress"})
			return err
		})
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits(uniqueKey("task"))); err != nil {
			t.Fatal(err)
		}
		each("FinishTask", func(l *ratelimit.Limiter) error {
			f, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			if err == nil && f.ReleasedReservations == 0 {
				err = fmt.Errorf("released no reservation: %+v", f)
			}
			return err
		})
	}
	shapes := map[string]func(string) []ratelimit.Limit{"request": request, "single": single}
	if moment == vacuumedQuiet {
		// A quiet moment: a history of requests, every one settled (Commit
		// releases the lease too), then a vacuum. It invalidates every plan:
		// the flows below are planned on what it recorded.
		for i := range 8 {
			for shape, limits := range shapes {
				g := reserve(limits(fmt.Sprintf("quiet-%s-%d", shape, i)))
				s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 420})
				if err != nil || s.LeasesReleased != len(g.Leases) {
					t.Fatalf("settling a %s: %+v, %v", shape, s, err)
				}
			}
		}
		if err := testq.LedgersVacuumAnalyze(ctx, pool); err != nil {
			t.Fatal(err)
		}
	} else {
		// Plan every flow on empty tables, past the first calls that are
		// planned for their own parameters.
		warmUp := func(name, shape string, run func(l *ratelimit.Limiter) error) {
			t.Helper()
			if err := run(l); err != nil {
				t.Fatalf("warm-up %s of a %s: %v", name, shape, err)
			}
		}
		for i := range 8 {
			for shape, limits := range shapes {
				for name, flow := range flows {
					ls := limits(fmt.Sprintf("warm-%s-%s-%d", shape, name, i))
					g := reserve(ls)
					warmUp(name, shape, func(l *ratelimit.Limiter) error { return flow(l, ls, g) })
				}
				taskFlows(limits, func(name string, run func(l *ratelimit.Limiter) error) { warmUp(name, shape, run) })
			}
		}
	}
	// Grow: requests in flight, each holding two reservations and a lease.
	const inFlight = 1500
	for i := range inFlight {
		reserve(request(fmt.Sprintf("held-%d", i)))
	}
	// And tasks running, each holding a request: a statement that reads
	// the partial index of running tasks instead of probing its task by key
	// reads them all, and one that reads the indexes of every ledger row's
	// task (empty at the quiet vacuum) reads all of their grants.
	const running = 300
	for i := range running {
		task := startSync(t, l, time.Minute)
		if _, err := l.Reserve(ctx, task.ID, task.AttemptID, request(fmt.Sprintf("running-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if moment == analyzedGrown {
		if err := testq.TablesAnalyze(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}

	// measureTx runs one flow in a rolled-back transaction and fails the
	// test when it read more than a few index entries of any table.
	measureTx := func(name, shape string, run func(tx pgx.Tx) error) {
		t.Helper()
		reads := indexReads(t, pool, func(tx pgx.Tx) {
			if err := run(tx); err != nil {
				t.Fatalf("%s of a %s: %v", name, shape, err)
			}
		})
		for table, read := range reads {
			if read > 20 {
				t.Errorf("%s of a %s read %d index entries of %s with %d requests in flight, want a few: a plan scans live rows instead of probing its own",
					name, shape, read, table, inFlight)
			}
		}
	}
	measure := func(name, shape string, run func(l *ratelimit.Limiter) error) {
		t.Helper()
		measureTx(name, shape, func(tx pgx.Tx) error { return run(l.WithTx(tx)) })
	}
	for shape, limits := range shapes {
		for name, flow := range flows {
			ls := limits(uniqueKey("measured"))
			g := reserve(ls)
			measure(name, shape, func(l *ratelimit.Limiter) error { return flow(l, ls, g) })
		}
		taskFlows(limits, func(name string, run func(l *ratelimit.Limiter) error) { measure(name, shape, run) })
	}
	// Recovery reclaiming a task whose worker died, holding a request: it
	// runs while it holds the counters of the task's reservations, so it
	// must not read the other running tasks' leases either.
	dead := startSync(t, l, time.Second)
	if _, err := l.Reserve(ctx, dead.ID, dead.AttemptID, request(uniqueKey("dead"))); err != nil {
		t.Fatal(err)
	}
	waitPast(t, pool, dead.LeaseExpiresAt)
	measureTx("RecoveryTaskReclaim", "request", func(tx pgx.Tx) error {
		rows, err := queries.RecoveryTaskReclaim(ctx, tx, db.RecoveryTaskReclaimParams{
			MaxRequeues: 5, TaskIds: []pgtype.UUID{mustUUID(t, dead.ID)},
		})
		if err == nil && (len(rows) != 1 || rows[0].ReleasedLeases != 1) {
			err = fmt.Errorf("reclaimed %+v, want the task and its lease", rows)
		}
		return err
	})
}
