package ratelimit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// CancelTask cancels a queued task and gives back what it holds while it
// waits; no worker claims it afterwards. It is for the task's owner (a
// gateway whose client went away, say).
//
// The task becomes cancelled (ErrorCode ErrorCodeCancelledWhileQueued,
// ErrorMessage reason, which may be empty) with a task.cancelled event.
// Its queue places are deleted (they count again), and the reservations
// and leases taken for it (a Reserve naming only the task) are released
// (reason task_finished). FinishResult says how much; its Task is the
// cancelled task.
//
// Only a queued task is cancelled, once: one that is not (a worker claimed
// it, it finished, or an earlier CancelTask cancelled it) is refused with
// a *TaskNotQueuedError (errors.Is ErrTaskNotQueued) naming its status,
// and nothing is changed; ErrUnknownTask when no task has that id. A
// running task is its worker's to finish (FinishTask with TaskCancelled).
// Against a concurrent ClaimTask, one of the two wins the task row: the
// task is either cancelled and never claimed, or claimed and the cancel
// refused (Status running). A refusal names the status the cancel found
// when it locked the task row, even if the task is queued again by the
// time it returns (a claimer that left put it back, or Recover requeued
// it): GetTask tells, and a CancelTask then may cancel it. Against a
// concurrent Reserve for the task, as
// with FinishTask: what the admission wrote first is released, one that
// comes later is refused with ErrTaskFinished.
//
// Outside READ COMMITTED (a REPEATABLE READ transaction of yours, say) it
// refuses with ErrIsolation and writes nothing. Inside a caller's
// transaction (WithTx) it locks the task row FOR UPDATE as FinishTask
// does, so a transaction cancels or finishes one task at most
// (*LockOrderError).
//
// Cancelling works as for FinishTask: when ctx ends before CancelTask
// returns, it returns ctx's error, with the FinishResult of the task when
// its batch cancelled it, which is not undone. A batch once sent runs to
// its answer, and the reservations linked to the task since the first
// read, which only that answer names, are released in the background; one
// still unanswered 100 ms after ctx ended is cancelled, and FinishTask's
// doc says what a lost answer leaves to Recover. When CancelTask fails
// otherwise after its second round trip was sent (the connection broke),
// the task may have been cancelled all the same, and a retry is safe (it
// is then refused with Status cancelled; GetTask shows the task).
//
// Two round trips, as FinishTask: a read of the task's status and open
// reservations, then one batch that locks their counters (lock order), then
// the task row, cancels the task and releases what it holds, as one
// transaction; and a third, rarely, for reservations linked to the task
// between the two (released once the task is cancelled; in a caller's
// transaction, left to Recover).
func (l *Limiter) CancelTask(ctx context.Context, taskID, reason string) (FinishResult, error) {
	if err := l.callable(ctx); err != nil {
		return FinishResult{}, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return FinishResult{}, err
	}
	if err := validateOptionalText("reason", reason, maxMessageBytes); err != nil {
		return FinishResult{}, err
	}
	now := l.opts.clock.at()

	// The token is not checked: the plan's token_matches is ignored.
	plan, err := l.queries.TaskFinishPlan(ctx, l.conn, db.TaskFinishPlanParams{TaskID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return FinishResult{}, errorf("ratelimit: cancel task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return FinishResult{}, wrapDBError(ctx, "cancel task", err)
	}
	if !plan.ReadCommitted {
		return FinishResult{}, errorf("ratelimit: cancel task: %w", ErrIsolation)
	}
	if plan.Status != TaskQueued {
		return FinishResult{}, &TaskNotQueuedError{TaskID: taskID, Status: plan.Status}
	}

	rids := plan.OpenReservationIds
	if rids == nil {
		rids = []pgtype.UUID{} // NULL would make every reservation late
	}
	first := phaseCounters
	if len(rids) == 0 {
		first = phaseRows
	}
	if err := l.enterLeases(opCancelTask, first, phaseRows, plan.LiveLeaseIds); err != nil {
		return FinishResult{}, err
	}
	b := &pgx.Batch{}
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, rids) })
	}
	locked := l.queueTaskLock(ctx, b, id)
	var cancelled []db.TaskCancelRow
	queueRows(b, &cancelled, func(r db.DBTX) {
		_, _ = l.queries.TaskCancel(ctx, r, db.TaskCancelParams{PlannedReservationIds: rids, Now: now, Reason: optText(reason), TaskID: id})
	})
	released := l.queueReleaseIfFinished(ctx, b, id, rids)
	if unread, err := l.runEndBatch(ctx, b); err != nil {
		if unread != nil {
			l.releaseIfEndedUnread(unread, id, now)
		}
		return FinishResult{}, l.endBatchError(ctx, "cancel task", taskID, err)
	}
	if hook := l.opts.cancelBatchHook; hook != nil {
		hook()
	}
	if len(cancelled) == 0 {
		if left := callerLeft(ctx, "cancel task", taskID); left != nil {
			return FinishResult{}, left
		}
		// A worker claimed the task (or it finished) between the two round
		// trips: refused with the status the batch locked. A read after the
		// batch could find the task queued again (unclaimed, or requeued by
		// Recover), and refuse it as "not queued (status queued)".
		if len(*locked) == 0 {
			return FinishResult{}, errorf("ratelimit: cancel task %s: %w", taskID, ErrUnknownTask)
		}
		return FinishResult{}, &TaskNotQueuedError{TaskID: taskID, Status: (*locked)[0]}
	}
	c := db.TaskFinishRow(cancelled[0]) // the same columns: TaskCancel's comment
	res := finishResult(c)
	late, err := l.releaseLate(ctx, "cancel task", c.LateReservationIds, now)
	res.ReleasedReservations = int(*released) + late
	if err == nil {
		err = callerLeft(ctx, "cancel task", taskID)
	}
	return res, err
}

// queueReleaseIfFinished queues TaskReleaseIfFinished, the last statement
// of FinishTask's and CancelTask's batch: the release of the task's
// reservations rids, which the first round trip read open, only if the
// task is finished when it runs. It returns where the count it released
// goes once the batch runs (0 with no rids: nothing is queued).
func (l *Limiter) queueReleaseIfFinished(ctx context.Context, b *pgx.Batch, id pgtype.UUID, rids []pgtype.UUID) *int32 {
	released := new(int32)
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) {
			_, _ = l.queries.TaskReleaseIfFinished(ctx, r, db.TaskReleaseIfFinishedParams{ReservationIds: rids, TaskID: id})
		}).QueryRow(func(row pgx.Row) error { return row.Scan(released) })
	}
	return released
}

// queueTaskLock queues TaskFinishLock, which locks the task row in
// FinishTask's and CancelTask's batch, then TaskFenceLock, which takes the
// task's fence against admissions for it, and returns where the row
// lock's answer goes once the batch runs: the task's status under the
// lock, none when the task is gone. A refusal names that status, the one
// the batch saw, not one read after it: the task may have moved on by then
// (queued again, claimed again).
func (l *Limiter) queueTaskLock(ctx context.Context, b *pgx.Batch, id pgtype.UUID) *[]string {
	locked := new([]string)
	queue(b, func(r db.DBTX) { _, _ = l.queries.TaskFinishLock(ctx, r, id) }).Query(func(rows pgx.Rows) error {
		var err error
		*locked, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	queue(b, func(r db.DBTX) { _ = l.queries.TaskFenceLock(ctx, r, id) })
	return locked
}
