package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// tableRows is the row count of every pgadmit table.
type tableRows struct {
	dbtest.TableRowCountsRow
	dbtest.MaintenanceRowCountsRow
}

// allTableRows counts the rows of every pgadmit table.
func allTableRows(t *testing.T, pool dbtest.DBTX) tableRows {
	t.Helper()
	m, err := testq.MaintenanceRowCounts(context.Background(), pool)
	if err != nil {
		t.Fatalf("MaintenanceRowCounts: %v", err)
	}
	return tableRows{rowCounts(t, pool), m}
}

// byTable lists the counts of r by table name.
func (r tableRows) byTable() map[string]int64 {
	return map[string]int64{
		"tasks": r.Tasks, "attempts": r.Attempts, "events": r.Events, "admissions": r.Admissions,
		"counters": r.Counters, "reservations": r.Reservations, "leases": r.Leases,
		"allotments": r.Allotments, "maintenance leases": r.MaintenanceLeases, "maintenance cursors": r.MaintenanceCursors,
	}
}

// A gateway runs for three months, each day the same traffic: a task that
// finishes after a committed admission and an event, an admission nobody
// settles, a sync task whose caller dies holding an admission, an async
// task whose worker dies (requeued each day, failed past the requeue cap),
// a block of a Local limit returned and one whose holder stops reporting;
// then Recover and Prune, with their default options and a day's cutoff,
// as the README's schedule has them. Every table levels off once the task
// retention and the requeue cap have passed: none holds more rows in the
// last two months than it did in the first weeks after that, and the
// books still balance.
func TestPruneKeepsEveryTableBoundedForMonths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	awaitLocalWindow(t, pool) // every day's windows are the current hour's (the test takes seconds)
	var clock testClock
	l, m := clocked(pool, &clock)
	_, withEvents := clocked(pool, &clock, ratelimit.WithPruneEvents(true))
	key := uniqueKey("gw")
	hourly := window("api_key", key, ratelimit.MetricTokens, 1e12, 10)
	hourly.Window = time.Hour // every day's admissions in one counter, as its Local blocks
	slot := concurrent("model", key, 1e6)
	queue := queueLimit(key, 1e6)
	reserve := func(taskID, attemptID string) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, taskID, attemptID, []ratelimit.Limit{hourly, slot})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return g
	}
	local := func() *ratelimit.Limiter {
		h := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}))
		t.Cleanup(h.Close)
		reserveLocal(t, h, key, 1e9, 1)
		return h
	}

	const days, settled = 90, 30 // retention (7 days) and requeue cap (5) are long past by day 30
	var early, late tableRows    // the most rows of each table, in days settled/2 to settled-1 and from settled on
	observe := func(day int) {
		t.Helper()
		if day < settled/2 {
			return
		}
		peak := &late
		if day < settled {
			peak = &early
		}
		*peak = maxRows(*peak, allTableRows(t, pool))
	}
	for day := range days {
		done := startSync(t, l, time.Hour, queue)
		if _, err := l.Commit(ctx, reserve(done.ID, done.AttemptID), nil); err != nil {
			t.Fatalf("day %d: Commit: %v", day, err)
		}
		if _, err := l.AppendEvent(ctx, done.ID, done.ExecutionToken, ratelimit.Event{Type: "task.progress"}); err != nil {
			t.Fatalf("day %d: AppendEvent: %v", day, err)
		}
		if _, err := l.FinishTask(ctx, done.ID, done.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatalf("day %d: FinishTask: %v", day, err)
		}
		reserve("", "") // never settled
		crashed := startSync(t, l, time.Minute, queue)
		reserve(crashed.ID, crashed.AttemptID) // its caller dies
		createAsync(t, l, queue)
		for { // workers claim every due task, and die
			if _, err := l.ClaimTask(ctx, "w", time.Minute); errors.Is(err, ratelimit.ErrNoTask) {
				break
			} else if err != nil {
				t.Fatalf("day %d: ClaimTask: %v", day, err)
			}
		}
		returned := local()
		if _, err := returned.Release(ctx, reserveLocal(t, returned, key, 1e9, 1), "done"); err != nil {
			t.Fatalf("day %d: Release(Local): %v", day, err)
		}
		returned.Close()
		local() // its holder is never heard from again (on the test clock)

		observe(day) // the day's history

		clock.advance(24 * time.Hour)
		if _, err := m.Recover(ctx); err != nil {
			t.Fatalf("day %d: Recover: %v", day, err)
		}
		if _, err := m.Prune(ctx, 24*time.Hour); err != nil {
			t.Fatalf("day %d: Prune: %v", day, err)
		}
		if _, err := withEvents.Prune(ctx, 24*time.Hour); err != nil {
			t.Fatalf("day %d: Prune(WithPruneEvents): %v", day, err)
		}
		observe(day) // what the next day starts with
	}
	for table, n := range late.byTable() {
		if was := early.byTable()[table]; n > was {
			t.Errorf("%s: %d rows at most in days %d-%d, more than the %d of days %d-%d: it grows", table, n, settled, days-1, was, settled/2, settled-1)
		}
	}
	t.Logf("rows at most in days %d-%d: %+v", settled, days-1, late.byTable())
	if late.Tasks == 0 || late.Allotments == 0 || late.Reservations == 0 {
		t.Fatalf("rows at most in days %d-%d: %+v; want each day's history there until it is pruned", settled, days-1, late.byTable())
	}
	assertDoctorOK(t, pool)
}

// maxRows is the larger count of each table.
func maxRows(a, b tableRows) tableRows {
	a.Tasks, a.Attempts, a.Events = max(a.Tasks, b.Tasks), max(a.Attempts, b.Attempts), max(a.Events, b.Events)
	a.Admissions, a.Counters = max(a.Admissions, b.Admissions), max(a.Counters, b.Counters)
	a.Reservations, a.Leases = max(a.Reservations, b.Reservations), max(a.Leases, b.Leases)
	a.Allotments, a.MaintenanceLeases = max(a.Allotments, b.Allotments), max(a.MaintenanceLeases, b.MaintenanceLeases)
	a.MaintenanceCursors = max(a.MaintenanceCursors, b.MaintenanceCursors)
	return a
}
