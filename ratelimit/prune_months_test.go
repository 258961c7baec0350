package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
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
// settles, a sync task whose caller dies holding an admission and one it
// attached (Attach), a task that finishes holding one it attached, a
// queued task cancelled holding a reservation and a lease, an async task
// holding them whose worker dies and which its owner cancels once it is
// requeued, a task whose creator leaves while CreateTask runs (cancelled
// in the background), an async task whose worker dies (requeued each day,
// failed past the requeue cap), a claim whose claimer left (put back,
// claimed again), refusals of a new key's admissions, alone and in a combined
// batch, that leave its windows' rows empty, a hot batch on one key and a
// burst of callers on it, blocks of a Local limit returned and one whose
// holder stops reporting; then Recover and Prune, with their default
// options and a day's cutoff, as docs/dba.md's schedule has them. Every
// table levels off once the task retention and the requeue cap have
// passed: none holds more rows in the last two months than it did in the
// first weeks after that; each day's maintenance leaves nothing running or
// held; and the books still balance.
func TestPruneKeepsEveryTableBoundedForMonths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Every day's windows are the current one of an hour, or a few minutes
	// more, with a minute left (the test takes seconds).
	hour := hourWindow(t, pool)
	var clock testClock
	l, m := clocked(pool, &clock)
	_, withEvents := clocked(pool, &clock, ratelimit.WithPruneEvents(true))
	key := uniqueKey("gw")
	hourly := window("api_key", key, ratelimit.MetricTokens, 1e12, 10)
	hourly.Window = hour // every day's admissions in one counter, as its Local blocks
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
		reserveLocal(t, h, hour, key, 1e9, 1)
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
	// holding creates an async task that holds a reservation and a lease
	// while it waits (a Reserve naming only the task).
	holding := func() ratelimit.Task {
		t.Helper()
		task := createAsync(t, l, queue)
		reserve(task.ID, "")
		return task
	}
	// cancelWaiting has the owner of a queued task cancel it, which gives
	// back its queue place and the reservations and leases it holds.
	cancelWaiting := func(day int, task ratelimit.Task, holds int) {
		t.Helper()
		if res, err := l.CancelTask(ctx, task.ID, "client left"); err != nil || res.ReleasedReservations != holds || res.ReleasedLeases != holds || res.DeletedAdmissions != 1 {
			t.Fatalf("day %d: CancelTask = %+v, %v; want its queue place, %d reservations and %d leases given back", day, res, err, holds, holds)
		}
	}
	// burst has callers come at once on one key, each reserving and
	// committing: their calls go together in combined (hot) batches.
	burst := func(day int) {
		t.Helper()
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{hourly, slot})
				if err == nil {
					_, err = l.Commit(ctx, g, nil)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("day %d: burst: %v", day, err)
		}
	}
	// abandoned has a caller of CreateTask leave while its statement waits
	// for its queue's lock, which a creation in an open transaction holds:
	// the statement runs to its answer once the lock is free, and the task
	// it created for nobody is cancelled in the background
	// (TaskCancelAbandoned), its queue place given back. An async task on
	// even days, a sync one on odd days.
	leftQueue := queueLimit(uniqueKey("left"), 1)
	abandoned := func(day int) {
		t.Helper()
		blocker, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("day %d: Begin: %v", day, err)
		}
		defer func() { _ = blocker.Rollback(ctx) }()
		if _, err := ratelimit.New(pool).WithTx(blocker).CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{leftQueue}}); err != nil {
			t.Fatalf("day %d: CreateTask(WithTx): %v", day, err)
		}
		spec := ratelimit.TaskSpec{Async: day%2 == 0, Kind: "test", QueueLimits: []ratelimit.Limit{leftQueue}}
		if !spec.Async {
			spec.Worker, spec.LeaseTTL = "w-left", time.Hour
		}
		leaving := ratelimit.New(pool, ratelimit.WithClock(clock.now), ratelimit.WithLeftStatementGrace(time.Minute))
		before := summary(t, pool)
		callerCtx, leave := context.WithCancel(ctx)
		defer leave()
		errs := make(chan error, 1)
		go func() { _, err := leaving.CreateTask(callerCtx, spec); errs <- err }()
		pgtest.AwaitLockWaiters(t, pool, "CreateTask")
		leave()
		if err := blocker.Rollback(ctx); err != nil {
			t.Fatalf("day %d: Rollback: %v", day, err)
		}
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("day %d: CreateTask after its caller left: %v, want context.Canceled", day, err)
		}
		leaving.Close() // waits for the cancelling, done in the background
		after := summary(t, pool)
		if after.TasksCancelled != before.TasksCancelled+1 || after.TasksQueued != before.TasksQueued || after.TasksRunning != before.TasksRunning ||
			after.AttemptsRunning != before.AttemptsRunning || after.Admissions != before.Admissions {
			t.Fatalf("day %d: after a creator left %+v, before %+v; want one more task cancelled and nothing else changed", day, after, before)
		}
	}
	var retried ratelimit.Task // an async task with a reservation, requeued once, cancelled the day after its worker died
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
		reserve(crashed.ID, crashed.AttemptID) // its caller dies, holding it and one it attached
		if _, err := l.Attach(ctx, crashed.AttemptID, reserve("", "")); err != nil {
			t.Fatalf("day %d: Attach(crashed): %v", day, err)
		}
		attached := startSync(t, l, time.Hour, queue)
		if _, err := l.Attach(ctx, attached.AttemptID, reserve("", "")); err != nil {
			t.Fatalf("day %d: Attach: %v", day, err)
		}
		if res, err := l.FinishTask(ctx, attached.ID, attached.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil || res.ReleasedReservations != 1 || res.ReleasedLeases != 1 {
			t.Fatalf("day %d: FinishTask(attached) = %+v, %v; want the attached reservation and lease released", day, res, err)
		}
		cancelWaiting(day, holding(), 1) // its owner's client leaves while it waits
		abandoned(day)                   // its creator leaves before CreateTask answers
		if retried.ID != "" {
			if got := getTask(t, l, retried.ID); got.Status != ratelimit.TaskQueued || got.RequeueCount != 1 {
				t.Fatalf("day %d: yesterday's task is %s, requeued %d times; want queued after one requeue", day, got.Status, got.RequeueCount)
			}
			cancelWaiting(day, retried, 0) // requeued, its owner gives up on it (Recover gave back what it held)
		}
		retried = holding() // its worker dies today
		createAsync(t, l, queue)
		for first := true; ; first = false { // workers claim every due task, and die
			claimed, err := l.ClaimTask(ctx, "w", time.Minute)
			if errors.Is(err, ratelimit.ErrNoTask) {
				break
			} else if err != nil {
				t.Fatalf("day %d: ClaimTask: %v", day, err)
			}
			if first { // its claimer left before the answer: put back as ClaimTask does, and claimed again
				p := db.TaskUnclaimParams{TaskID: mustUUID(t, claimed.ID), Token: mustUUID(t, claimed.ExecutionToken), Now: new(clock.now())}
				if n, err := queries.TaskUnclaim(ctx, pool, p); err != nil || n != 1 {
					t.Fatalf("day %d: TaskUnclaim = %d, %v; want the claim put back", day, n, err)
				}
			}
		}
		// A key first seen today, whose admissions are refused: the refusals
		// leave rows of its windows behind, empty (Reserve's doc).
		fresh := uniqueKey("new")
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", fresh, ratelimit.MetricTokens, 1e12, 1), window("team", fresh, ratelimit.MetricRequests, 1, 2)}); !errors.Is(err, ratelimit.ErrExceeded) {
			t.Fatalf("day %d: Reserve(refused) = %v, want ErrExceeded", day, err)
		}
		// A batch as the combiner sends for concurrent callers, hot on
		// hourly's counter and slot's scope, committed as one hot batch too.
		hot := []ratelimit.BatchRequest{{Limits: []ratelimit.Limit{hourly, slot}}, {Limits: []ratelimit.Limit{hourly, slot}}, {Limits: []ratelimit.Limit{hourly, slot}},
			{Limits: []ratelimit.Limit{window("model", fresh, ratelimit.MetricTokens, 10, 11)}}} // refused in the batch
		grants, errs, err := l.ReserveCombined(ctx, hot)
		if err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], ratelimit.ErrExceeded) {
			t.Fatalf("day %d: ReserveCombined = %v, %v; want three grants and a refusal", day, errs, err)
		}
		if _, err := l.CommitCombined(ctx, grants[:3]); err != nil {
			t.Fatalf("day %d: CommitCombined: %v", day, err)
		}
		burst(day) // many callers on one key at once
		returned := local()
		if _, err := returned.Release(ctx, reserveLocal(t, returned, hour, key, 1e9, 1), "done"); err != nil {
			t.Fatalf("day %d: Release(Local): %v", day, err)
		}
		if _, err := returned.Commit(ctx, reserveLocal(t, returned, hour, key, 1e9, 1), nil); err != nil {
			t.Fatalf("day %d: Commit(Local): %v", day, err)
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
		if day > 0 { // day 0's unsettled reservation is in a window that has not ended a day before the clock yet
			assertMaintainedHoldsNothing(t, pool, key, day)
		}
	}
	if s := l.Stats(); s.Reserve.Hot == 0 || s.Settle.Hot == 0 {
		t.Fatalf("Stats = %+v; want hot reserve and settle batches among each day's", s)
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

// assertMaintainedHoldsNothing fails the test when anything is still
// running or held after a day's Recover and Prune: a task or an attempt
// running, an open reservation, an unreleased lease, reserved counter
// value, an open block of the Local limit of key.
func assertMaintainedHoldsNothing(t *testing.T, pool *pgxpool.Pool, key string, day int) {
	t.Helper()
	s := summary(t, pool)
	if s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 {
		t.Fatalf("day %d: after Recover and Prune %+v; want nothing running or held", day, s)
	}
	if open := openBlocks(t, pool, key); len(open) != 0 {
		t.Fatalf("day %d: after Recover and Prune %d blocks are open: %+v", day, len(open), open)
	}
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
