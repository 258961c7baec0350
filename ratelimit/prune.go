package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// PruneResult counts the rows one Prune call deleted.
type PruneResult struct {
	// Cutoff is now() - olderThan on the database's clock: only what ended
	// before it was deleted.
	Cutoff time.Time
	// TaskCutoff is now() - the task retention: tasks that finished before
	// it were deleted. Zero when finished tasks are kept
	// (WithTaskRetention(-1)).
	TaskCutoff time.Time
	// ReleasedStaleReservations: reservations still open in windows that
	// ended before the cutoff, released (reason window_ended) so that their
	// window can go. Their caller never settled them: no task (nothing for
	// Recover to find), or a reply lost after the server committed.
	ReleasedStaleReservations int64
	// Counters: counter windows that ended before the cutoff, with no open
	// reservation drawing on them.
	Counters int64
	// Reservations: finished (committed or released) reservations whose
	// window ended before the cutoff and whose counter row is gone
	// (including the stale ones this call released).
	Reservations int64
	// Leases: leases released, or expired without release, before the cutoff.
	Leases int64
	// Allotments: returned blocks of Local limits whose window ended before
	// the cutoff and whose counter row is gone.
	Allotments int64
	// Events: events of tasks finished before the cutoff (WithPruneEvents);
	// the events deleted with their tasks are not counted here.
	Events int64
	// Tasks: tasks that finished before the task cutoff, deleted with their
	// attempts, events and queue admissions.
	Tasks int64
	// Skipped is true when another process held the prune lease: this call
	// did nothing (the other one is doing the work).
	Skipped bool
}

// String summarizes what was deleted, for logs and the CLI: every count,
// as Describe says a run that returned no error. After a run that returned
// an error, Describe says it. The zero result, which Prune returns with an
// error that came before it took the prune lease, says that the call did
// nothing.
func (r PruneResult) String() string { return r.describe(stepsFailed{}) }

// Describe says what the run that returned r and err did, as String does,
// unless a step failed (a *StepError in err, however joined and wrapped):
// it then leaves out the counts that stayed 0 because every step feeding
// them failed or did not run (they would read as steps that ran and found
// nothing), and ends naming the failed steps and saying how many the run,
// when it stopped at one, did not reach (its Example's output):
//
//	pruned before 2026-12-07T08:00:00Z: released 0 stale reservations; deleted 2 counter windows, 0 reservations, 0 leases, 1 event, finished tasks kept; failed steps: allotments
//
// The *StepErrors of another job (a Recover's) are not this run's. A count
// that other steps fed too, or that the failed step fed before it failed,
// is said. Describe(nil) is String.
func (r PruneResult) Describe(err error) string { return r.describe(failedStepsIn(jobPrune, err)) }

// describe says what the run did, its steps s failed or not run
// (describeClauses).
func (r PruneResult) describe(s stepsFailed) string {
	if r.Skipped {
		return "prune skipped: another process holds the prune lease"
	}
	if r == (PruneResult{}) {
		return "prune did nothing: it ended before it took the prune lease"
	}
	return "pruned before " + r.Cutoff.UTC().Format(time.RFC3339) + ": " + describeClauses(r.clauses(), s)
}

// clauses are what a Prune run's line says after its cutoff, each count
// with the steps that add to it: a step added to Prune is added here.
func (r PruneResult) clauses() []clause {
	tasks := tally{one: "finished tasks kept"}
	if !r.TaskCutoff.IsZero() {
		before := " finished before " + r.TaskCutoff.UTC().Format(time.RFC3339)
		tasks = tally{"task" + before, "tasks" + before, r.Tasks, []string{stepTasks}}
	}
	return []clause{
		{verb: "released", tallies: []tally{{"stale reservation", "stale reservations", r.ReleasedStaleReservations, []string{stepReleaseStale}}}},
		{verb: "deleted", sep: ", ", tallies: []tally{
			{"counter window", "counter windows", r.Counters, []string{stepCounters}},
			{"reservation", "reservations", r.Reservations, []string{stepReservations}},
			{"allotment", "allotments", r.Allotments, []string{stepAllotments}},
			{"lease", "leases", r.Leases, []string{stepReleasedLeases, stepExpiredLeases}},
			{"event", "events", r.Events, []string{stepEvents}},
			tasks,
		}},
	}
}

// The steps of Prune, in order (events only WithPruneEvents, tasks only
// with a task retention), as StepError.Step, Progress.Step and
// LockWaitError.Step name them.
const (
	stepReleaseStale   = "release stale reservations"
	stepCounters       = "counters"
	stepReservations   = "reservations"
	stepReleasedLeases = "released leases"
	stepExpiredLeases  = "expired leases"
	stepAllotments     = "allotments"
	stepEvents         = "events"
	stepTasks          = "tasks"
)

// reasonWindowEnded is recorded on the reservations Prune releases.
const reasonWindowEnded = "window_ended"

// cursorPruneEvents names Prune's walk over finished tasks whose events it
// deletes, in gateway_maintenance_cursors.
const cursorPruneEvents = "prune/events"

// epoch is the lower bound of the first page of a keyset walk: nothing in
// the tables is older.
var epoch = time.Unix(0, 0).UTC()

// Prune deletes history that ended more than olderThan ago, on the
// database's clock, and never live state, keeping the tables bounded.
// olderThan must be positive: otherwise it is a *ValidationError on
// "olderThan", and nothing runs.
//
// It works in batches of WithPruneBatchSize rows, each its own short
// statement. First it releases reservations still open in windows that
// ended before the cutoff (nobody settled them; their window no longer
// admits anything). Then it deletes:
//
//   - counter windows, finished reservations, and released or expired
//     leases;
//   - returned blocks of Local limits (once their counter row is gone);
//   - with WithPruneEvents, events of tasks finished before the cutoff;
//   - tasks that finished longer ago than the task retention
//     (WithTaskRetention, default DefaultTaskRetention, 7 days), with their
//     attempts, events and queue admissions (a task that still holds an
//     open reservation or lease, taken concurrently with its finish, is
//     kept until Recover has released them).
//
// A window is kept while an open reservation draws on it, and a finished
// reservation as long as its counter row exists, so every remaining counter
// still equals the sum of its reservations (Doctor stays clean); the
// ledger rows of a deleted task stay, with no task.
//
// Each run starts where work is left: deleted rows leave the indexes the
// next batch reads, and the walk over finished tasks whose events go
// resumes from the position the previous run saved. Single flight like
// Recover: while another process holds the prune lease the call returns at
// once with Skipped set, and a run whose release of that lease fails says
// so in its error, after its other errors if any. Like Recover, a stale
// reservation whose release the server rejects is left, and the rest are
// released; a step the server rejects does not stop the steps after it;
// the errors come back with what was done. Releasing a stale reservation
// locks its counter, and waits for a transaction that holds it: bound that
// with WithMaintenanceLockTimeout, as for Recover.
func (m *Maintenance) Prune(ctx context.Context, olderThan time.Duration) (res PruneResult, err error) {
	if err := m.callable(ctx); err != nil {
		return PruneResult{}, err
	}
	if olderThan <= 0 {
		return PruneResult{}, &ValidationError{Field: "olderThan", Value: olderThan, Reason: "must be positive"}
	}
	// Both cutoffs from one instant, each read as the steps send theirs (a
	// statement of its own behind PgBouncer in describe_exec mode failed).
	q, conn, now := m.queries, m.stepConn(), m.opts.clock.at()
	cutoffOf := func(d time.Duration) (time.Time, error) {
		return q.PruneCutoff(ctx, conn, db.PruneCutoffParams{OlderThanSeconds: d.Seconds(), Now: now})
	}
	if res.Cutoff, err = cutoffOf(olderThan); err != nil {
		return PruneResult{}, wrapDBError(ctx, "prune: cutoff", err)
	}
	if m.opts.taskRetention > 0 {
		if res.TaskCutoff, err = cutoffOf(m.opts.taskRetention); err != nil {
			return PruneResult{}, wrapDBError(ctx, "prune: task cutoff", err)
		}
	}
	lease, err := m.takeLease(ctx, jobPrune)
	if err != nil {
		return PruneResult{}, takeError(ctx, jobPrune, err)
	}
	if lease == nil {
		return PruneResult{Skipped: true}, nil
	}
	defer func() { err = withRelease(ctx, jobPrune, err, lease.release(ctx)) }()

	cutoff, batch := res.Cutoff, int32(m.opts.pruneBatchSize) // clamped to int4 by its option
	conn = m.stepConn()
	steps := []step{
		{stepReleaseStale, m.releaseStep(ctx, batch, nil, func(n int32) ([]pgtype.UUID, error) {
			return q.PruneReservationFindStale(ctx, conn, db.PruneReservationFindStaleParams{Cutoff: cutoff, BatchSize: n})
		}, reasonWindowEnded, &res.ReleasedStaleReservations)},
		{stepCounters, rowsStep(batch, func(n int32) (int64, error) {
			return q.PruneCounters(ctx, conn, db.PruneCountersParams{Cutoff: cutoff, BatchSize: n})
		}, &res.Counters)},
		{stepReservations, m.pruneReservations(ctx, cutoff, batch, &res.Reservations)},
		{stepReleasedLeases, rowsStep(batch, func(n int32) (int64, error) {
			return q.PruneLeasesReleased(ctx, conn, db.PruneLeasesReleasedParams{Cutoff: cutoff, BatchSize: n})
		}, &res.Leases)},
		{stepExpiredLeases, rowsStep(batch, func(n int32) (int64, error) {
			return q.PruneLeasesExpired(ctx, conn, db.PruneLeasesExpiredParams{Cutoff: cutoff, BatchSize: n})
		}, &res.Leases)},
		{stepAllotments, rowsStep(batch, func(n int32) (int64, error) {
			return q.PruneAllotments(ctx, conn, db.PruneAllotmentsParams{Cutoff: cutoff, BatchSize: n})
		}, &res.Allotments)},
	}
	if m.opts.pruneEvents {
		steps = append(steps, m.eventsStep(ctx, cutoff, batch, &res.Events))
	}
	if m.opts.taskRetention > 0 {
		taskCutoff := res.TaskCutoff
		steps = append(steps, step{stepTasks, rowsStep(batch, func(n int32) (int64, error) {
			return q.PruneTasks(ctx, conn, db.PruneTasksParams{Cutoff: taskCutoff, BatchSize: n})
		}, &res.Tasks)})
	}
	return res, runSteps(ctx, "prune", lease, steps, m.progressOf("prune", func(p *Progress) { p.Prune, p.Summary = res, res.String() }))
}

// eventsStep walks the tasks finished before cutoff from the position the
// last run saved, deleting their events page by page and saving the
// position after each page, so that no run walks the same tasks again.
// The position is read by the step's first batch, behind the lock bound as
// the pages are: a migration holding the cursors table makes that step
// give up (a *LockWaitError), not the run hang.
func (m *Maintenance) eventsStep(ctx context.Context, cutoff time.Time, batch int32, count *int64) step {
	var after db.PruneEventsParams
	positioned := false
	return step{stepEvents, keysetStep(batch, func(n int32) (int32, error) {
		if !positioned {
			pos, err := m.queries.MaintenanceCursorGet(ctx, m.stepConn(), cursorPruneEvents)
			if err != nil {
				return 0, fmt.Errorf("read the events position: %w", err)
			}
			after = db.PruneEventsParams{Cutoff: cutoff, AfterFinishedAt: pos.PositionAt, AfterID: pos.PositionID}
			positioned = true
		}
		after.BatchSize = n
		row, err := m.queries.PruneEvents(ctx, m.stepConn(), after)
		if err != nil {
			return 0, err
		}
		*count += int64(row.Deleted)
		if row.Scanned == 0 {
			return 0, nil
		}
		after.AfterFinishedAt, after.AfterID = row.LastFinishedAt, row.LastID
		err = m.queries.MaintenanceCursorSet(ctx, m.stepConn(), db.MaintenanceCursorSetParams{
			Name: cursorPruneEvents, PositionAt: row.LastFinishedAt, PositionID: row.LastID, Now: m.opts.clock.at(),
		})
		if err != nil {
			return 0, fmt.Errorf("save the events position: %w", err)
		}
		return row.Scanned, nil
	})}
}

// pruneReservations deletes finished reservations of windows that ended
// before cutoff and whose counter row is gone: a keyset walk per window
// length, each reading only the windows of that length that have ended, so
// the ledger of a long window still running is never read. Finished rows
// whose counter remains are passed over.
func (m *Maintenance) pruneReservations(ctx context.Context, cutoff time.Time, batch int32, deleted *int64) batchFunc {
	var (
		page   db.PruneReservationsParams // of the window length being walked (WindowSeconds 0: none)
		walked int32                      // the last window length done
	)
	return func(stop error) (bool, bool, error) {
		if stop != nil {
			return false, false, stop
		}
		if page.WindowSeconds == 0 {
			next, err := m.queries.PruneReservationNextWindowLength(ctx, m.stepConn(), walked)
			if err != nil || next == 0 {
				return false, err == nil, err
			}
			page = db.PruneReservationsParams{WindowSeconds: next, StartsBefore: cutoff.Add(-time.Duration(next) * time.Second),
				AfterWindowStart: epoch, AfterID: pgtype.UUID{Valid: true}, BatchSize: batch}
		}
		row, err := m.queries.PruneReservations(ctx, m.stepConn(), page)
		if err != nil {
			return false, false, err
		}
		*deleted += int64(row.Deleted)
		page.AfterWindowStart, page.AfterID = row.LastWindowStart, row.LastID
		if row.Scanned < batch { // this length is done; the next batch starts on the next one
			walked, page = page.WindowSeconds, db.PruneReservationsParams{}
		}
		return true, true, nil
	}
}
