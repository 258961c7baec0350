package ratelimit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// ClaimTask claims the next due queued async task for workerID: the task
// becomes running with a new execution token and a lease of leaseTTL (zero
// means DefaultTaskLeaseTTL; otherwise whole seconds up to MaxLeaseTTL, or a
// *ValidationError on "leaseTTL"), a new attempt row and a task.running event.
// Workers never wait on each other (FOR NO KEY UPDATE SKIP LOCKED). Returns
// ErrNoTask when nothing is due. One round trip.
//
// Cancelling works as for Reserve and CreateTask: when ctx ends before the
// call returns, ClaimTask returns ctx's error and the worker holds no task.
// A statement once sent runs to its answer, and a task it claimed for the
// worker who left is put back: queued again, due at once, its attempt
// cancelled (error code "abandoned"), a task.queued event; this does not
// count as a requeue (WithMaxRequeues). It is put back in the background,
// ClaimTask returning ctx's error once the statement is answered
// (Limiter.Close waits for it; on a single connection it is done before
// ClaimTask returns). A statement still unanswered 100 ms after ctx ended
// is cancelled; a claim committed all the same, or one whose putting back
// still fails after 2 s of tries (a failed try, on a connection a restart
// ended, say, is tried again), lasts until Recover reclaims the task at
// the end of its lease.
func (l *Limiter) ClaimTask(ctx context.Context, workerID string, leaseTTL time.Duration) (Task, error) {
	if err := l.callable(ctx); err != nil {
		return Task{}, err
	}
	if err := validateText("workerID", workerID); err != nil {
		return Task{}, err
	}
	seconds, err := leaseSeconds("leaseTTL", leaseTTL)
	if err != nil {
		return Task{}, err
	}
	if err := l.enter("ClaimTask", phaseRows, phaseRows); err != nil {
		return Task{}, err
	}
	claim := func(ctx context.Context) (Task, error) {
		row, err := l.queries.TaskClaimNext(ctx, l.conn, db.TaskClaimNextParams{Worker: workerID, LeaseSeconds: seconds, Now: l.opts.clock.at()})
		if errors.Is(err, pgx.ErrNoRows) {
			return Task{}, ErrNoTask
		}
		if err != nil {
			return Task{}, wrapDBError(ctx, "claim task", err)
		}
		return taskFromRow(db.TaskGetRow(row)), nil
	}
	return runToAnswer(l, ctx, claim, l.unclaimAbandoned)
}

// unclaimAbandoned puts back a task that ClaimTask claimed after its caller
// had stopped waiting (its context ended): no worker runs it. Fenced by
// the claim's token, which putting it back clears, so idempotent: it is
// tried again as a release is (retryUnheld), and it runs in the background
// (runToAnswer) without racing a later call on the task: once recovery
// reclaims the task it is left alone.
func (l *Limiter) unclaimAbandoned(t Task, handedOver time.Time) {
	id, err := parseID("taskID", t.ID)
	if err != nil {
		return
	}
	token, err := parseID("token", t.ExecutionToken)
	if err != nil {
		return
	}
	p := db.TaskUnclaimParams{TaskID: id, Token: token, Now: l.opts.clock.at()}
	l.retryUnheld(handedOver, func(ctx context.Context) error {
		_, err := l.queries.TaskUnclaim(ctx, l.conn, p)
		return err
	})
}

// HeartbeatTask extends a running task's execution lease to now() + ttl
// (zero means DefaultTaskLeaseTTL; otherwise whole seconds up to
// MaxLeaseTTL, or a *ValidationError on "ttl") and returns the new expiry,
// on the database's clock. It is fenced by the execution token: when the token no
// longer owns the task the error is a *StaleTokenError (errors.Is
// ErrStaleToken) and the worker must stop. A claim stays valid until someone
// takes the task away, so a heartbeat after the lease expired still succeeds
// if recovery has not reclaimed the task yet. One round trip. The TTL runs
// from the database's clock once the task row is locked: a heartbeat that
// waited for the row (an Attach for the task holds it until the end of its
// transaction) gets its whole TTL from the end of that wait.
//
// A retry is safe: when HeartbeatTask fails after its statements were sent
// (its context ended, the connection broke), the lease may have been
// extended all the same, and a retry with the same token extends it again.
func (l *Limiter) HeartbeatTask(ctx context.Context, taskID, token string, ttl time.Duration) (time.Time, error) {
	if err := l.callable(ctx); err != nil {
		return time.Time{}, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return time.Time{}, err
	}
	tok, err := parseID("token", token)
	if err != nil {
		return time.Time{}, err
	}
	seconds, err := leaseSeconds("ttl", ttl)
	if err != nil {
		return time.Time{}, err
	}
	if err := l.enter("HeartbeatTask", phaseRows, phaseRows); err != nil {
		return time.Time{}, err
	}
	// The task row locked by a statement of its own first: TaskHeartbeat
	// then reads the clock for the new expiry after any wait for the row
	// (an Attach holds it until its transaction ends), and, its snapshot
	// taken after the lock, updates the version it sees, which it holds
	// (a lock in its own WITH deadlocked with FinishTask: TaskHeartbeatLock).
	b := &pgx.Batch{}
	queue(b, func(r db.DBTX) {
		_ = l.queries.TaskHeartbeatLock(ctx, r, db.TaskHeartbeatLockParams{TaskID: id, Token: tok})
	})
	var rows []db.TaskHeartbeatRow
	queueRows(b, &rows, func(r db.DBTX) {
		_, _ = l.queries.TaskHeartbeat(ctx, r, db.TaskHeartbeatParams{TaskID: id, Token: tok, LeaseSeconds: seconds, Now: l.opts.clock.at()})
	})
	if err := runBatch(ctx, l.conn, b); err != nil {
		return time.Time{}, wrapDBError(ctx, "heartbeat task", err)
	}
	if len(rows) == 0 {
		return time.Time{}, errorf("ratelimit: heartbeat task %s: %w", taskID, ErrUnknownTask)
	}
	row := rows[0]
	if row.RenewedUntil == nil {
		return time.Time{}, staleToken(taskID, row.Status)
	}
	return *row.RenewedUntil, nil
}

// staleToken explains why a token was refused, given the task's status as
// the refusing statement found it under the row's lock: not running, or
// running under another claim (every caller refuses only then).
func staleToken(taskID, status string) *StaleTokenError {
	e := &StaleTokenError{TaskID: taskID, Status: status}
	if status != TaskRunning {
		e.Reason = "the task is not running (finished, or reclaimed by recovery after its lease expired)"
	} else {
		e.Reason = "the token does not match the task's current claim (it was requeued and claimed again)"
	}
	return e
}

// FinishTask ends a running task with out.Status and gives back what the
// task holds; token, the execution token of the worker's claim, must still
// own the task (a *StaleTokenError otherwise, see below).
//
// The task takes out.Status (succeeded, failed or cancelled) with its
// error, its running attempt finishes with the same status, its
// concurrency leases are released, its queue admissions deleted (the
// places count again), a final event appended (task.completed, task.failed
// or task.cancelled), and the task's open reservations are released
// (reason task_finished; FinishResult says how many: commit grants before
// finishing).
//
// FinishTask waits for an Attach to the task in flight and settles what it
// linked (an Attach that comes later finds the task finished). Likewise
// with a Reserve for the task: one that has written its reservations and
// leases is waited for, and they are settled; one that comes later (or
// that checked the task before it finished and wrote after) waits for
// FinishTask and is refused with ErrTaskFinished, writing nothing. The
// reservations linked to the task after FinishTask's first read (by such
// an Attach or Reserve) are released once the task has finished, in one
// more round trip, only when there are any, which runs to its answer once
// sent; when ctx ended before it, or it failed, they are released in the
// background (as what a Reserve whose caller left obtained is), and an
// error comes with the FinishResult of the finished task. In a caller's transaction (WithTx)
// they stay open until Recover releases them: their counters cannot be
// locked after the task row.
//
// Cancelling: if ctx ends before FinishTask returns, the task may still
// finish. FinishTask returns ctx's error (errors.Is), with the FinishResult
// of the task when its batch finished it; a finish is not undone.
//
// A batch once sent runs to its answer, which alone names the reservations
// linked late, and they are released in the background (Limiter.Close
// waits for it; on a single connection, before FinishTask returns). A
// batch still unanswered 100 ms after ctx ended (waiting for the task row,
// say) is cancelled, as a Reserve's statement is.
//
// If the server committed that batch before the cancel landed, a pool set
// up with ConfigurePool reads its answer all the same. With pgx's default,
// or a connection that broke, the answer is lost and FinishTask cannot
// know whether the task finished. On a *pgxpool.Pool the task's open
// reservations are then released once pgx has closed that connection (the
// batch's transaction is over by then), if the task has finished.
//
// Left to Recover:
//   - the late reservations of a batch that committed unread on another
//     Executor, or after pgx stopped waiting for the server to close
//     (15 s), or behind a pooler that closes the client's connection at
//     once;
//   - releases that still fail after 2 s of tries.
//
// Inside a caller's transaction, a cancelled statement ends the
// transaction, and what it did is rolled back with it.
//
// Outside READ COMMITTED (a REPEATABLE READ transaction of yours, say) it
// refuses with ErrIsolation and writes nothing.
//
// A stale token gives a *StaleTokenError. When the first round trip finds
// the token stale, nothing is written. When the token goes stale between
// the two round trips (recovery reclaimed the task, or another call
// finished it), its Status is the one the batch found under the task row's
// lock, not one read later; the task, its attempts, leases, admissions and events are
// left as the new owner made them. The reservations FinishTask read are
// released only if the task had finished meanwhile (recovery failed it,
// another call finished it); a task queued or running again keeps them (a
// reservation of the ended attempt is recovery's to release, one naming
// only the task is the task's). Either way, do not retry with the same token.
//
// When FinishTask fails otherwise after its second round trip was sent
// (the connection broke, its batch was cancelled as above), the task may
// have finished all the same. A retry with the same token is safe: it
// writes nothing and, if the task finished, gets a *StaleTokenError whose
// Status is the finished status; GetTask then shows the outcome that
// finished it (the one sent, or recovery's: server_restarted for a sync task,
// requeue_limit_exceeded for an async one past its requeues; its attempt
// says execution_lease_expired).
//
// Two round trips: a read of the task's open reservations, then one batch
// that locks their counters first (lock order), then the task row,
// finishes the task and settles the reservations, as one transaction
// (and a third, rarely, as said above; after a batch's answer was lost, a
// read and a release in the background).
func (l *Limiter) FinishTask(ctx context.Context, taskID, token string, out Outcome) (FinishResult, error) {
	if err := l.callable(ctx); err != nil {
		return FinishResult{}, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return FinishResult{}, err
	}
	tok, err := parseID("token", token)
	if err != nil {
		return FinishResult{}, err
	}
	p, err := finishParams(id, tok, out)
	if err != nil {
		return FinishResult{}, err
	}
	p.Now = l.opts.clock.at()

	plan, err := l.queries.TaskFinishPlan(ctx, l.conn, db.TaskFinishPlanParams{TaskID: id, Token: tok})
	if errors.Is(err, pgx.ErrNoRows) {
		return FinishResult{}, errorf("ratelimit: finish task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return FinishResult{}, wrapDBError(ctx, "finish task", err)
	}
	if !plan.ReadCommitted {
		// TaskFinish would read the task's leases and reservations as of the
		// transaction's snapshot, blind to those linked since.
		return FinishResult{}, errorf("ratelimit: finish task: %w", ErrIsolation)
	}
	if plan.Status != TaskRunning || !plan.TokenMatches {
		return FinishResult{}, staleToken(taskID, plan.Status)
	}
	if hook := l.opts.finishPlanHook; hook != nil {
		hook()
	}

	rids := plan.OpenReservationIds
	first := phaseCounters
	if len(rids) == 0 {
		first = phaseRows
	}
	// TaskFinish locks the task's live leases: in a caller's transaction,
	// not below one an earlier operation locked (the lease lock order).
	if err := l.enterLeases(opFinishTask, first, phaseRows, plan.LiveLeaseIds); err != nil {
		return FinishResult{}, err
	}
	b := &pgx.Batch{}
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, rids) })
	}
	// The task row locked by a statement of its own: TaskFinish then reads
	// the task's leases and reservations after an Attach in flight, which
	// holds the row, has committed what it linked.
	locked := l.queueTaskLock(ctx, b, id)
	p.PlannedReservationIds = rids
	if p.PlannedReservationIds == nil {
		p.PlannedReservationIds = []pgtype.UUID{} // NULL would make every reservation late
	}
	var finished []db.TaskFinishRow
	queueRows(b, &finished, func(r db.DBTX) { _, _ = l.queries.TaskFinish(ctx, r, p) })
	// Released only when the task is finished now: a stale token whose
	// task runs under another claim (or is queued again) leaves them to it.
	released := l.queueReleaseIfFinished(ctx, b, id, rids)
	if unread, err := l.runEndBatch(ctx, b); err != nil {
		if unread != nil {
			l.releaseIfEndedUnread(unread, id, p.Now)
		}
		return FinishResult{}, l.endBatchError(ctx, "finish task", taskID, err)
	}
	if hook := l.opts.finishBatchHook; hook != nil {
		hook()
	}
	if len(finished) == 0 {
		if left := callerLeft(ctx, "finish task", taskID); left != nil {
			return FinishResult{}, left
		}
		// The claim changed between the two round trips: refused with the
		// status the batch locked. TaskFinish is fenced by status and token,
		// so a task still running then was claimed again under another token.
		if len(*locked) == 0 {
			return FinishResult{}, errorf("ratelimit: finish task %s: %w", taskID, ErrUnknownTask)
		}
		return FinishResult{}, staleToken(taskID, (*locked)[0])
	}
	f := finished[0]
	res := finishResult(f)
	res.ReleasedReservations = int(*released)
	late, err := l.releaseLate(ctx, "finish task", f.LateReservationIds, p.Now)
	res.ReleasedReservations += late
	if err == nil {
		err = callerLeft(ctx, "finish task", taskID)
	}
	return res, err
}

// endBatchError is the error of op's batch (runEndBatch) of taskID: ctx's
// once the caller left, as callerLeft says, whatever ended the batch (the
// cancel leftGrace later, say); inside a caller's transaction, or while ctx
// lasts, the batch's own (wrapDBError).
func (l *Limiter) endBatchError(ctx context.Context, op, taskID string, err error) error {
	if left := callerLeft(ctx, op, taskID); left != nil && !l.inTx {
		return left
	}
	return wrapDBError(ctx, op, err)
}

// callerLeft is the error of a FinishTask or CancelTask (op) of taskID
// whose caller left (ctx ended) before it returned: ctx's, whether or not
// its batch, which runs to its answer, ended the task. Nil while ctx
// lasts.
func callerLeft(ctx context.Context, op, taskID string) error {
	if err := ctx.Err(); err != nil {
		return errorf("ratelimit: %s %s: %w", op, taskID, err)
	}
	return nil
}

// finishResult is what a TaskFinish row says (or a TaskCancel row, of the
// same columns): the finished task, its leases released and queue places
// freed. The reservations the caller settles are its to count.
func finishResult(f db.TaskFinishRow) FinishResult {
	return FinishResult{
		Task: taskFromRow(db.TaskGetRow{
			ID: f.ID, Status: f.Status, AsyncMode: f.AsyncMode, Kind: f.Kind, Payload: f.Payload, Error: f.Error,
			ErrorCode: f.ErrorCode, ErrorMessage: f.ErrorMessage, LockedBy: f.LockedBy, ExecutionToken: f.ExecutionToken,
			ExecutionLeaseExpiresAt: f.ExecutionLeaseExpiresAt, AttemptCount: f.AttemptCount, RequeueCount: f.RequeueCount,
			LastEventSeq: f.LastEventSeq, NextRunAt: f.NextRunAt, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt,
			FinishedAt: f.FinishedAt,
		}),
		ReleasedLeases:    int(f.ReleasedLeases),
		DeletedAdmissions: int(f.DeletedAdmissions),
	}
}

// releaseLate releases the reservations that were linked to a task after
// FinishTask planned what to settle (an Attach or a Reserve that committed
// in between), once the task has finished, and returns how many it
// released. In a transaction of its own: their counters come before the
// task row in the lock order. Nobody holds them now, so the caller's
// leaving does not keep them: the statement, once sent, runs to its answer
// (statementContext), and when it cannot be sent (ctx is over) or fails,
// it is tried again in the background as a Reserve whose caller left is
// given back (giveBackUnheld), and the caller gets the error. In a
// caller's transaction, which holds the task row until it ends, they stay
// open until Recover releases them.
// op names the call in its error ("finish task", "cancel task").
func (l *Limiter) releaseLate(ctx context.Context, op string, ids []pgtype.UUID, now *time.Time) (int, error) {
	if len(ids) == 0 || l.inTx {
		return 0, nil
	}
	sp := releaseIDs(ids, reasonTaskFinished)
	sp.Now = now
	const what = ": release the reservations linked to the task since it was read"
	err := ctx.Err()
	if err == nil {
		sctx, cancel := statementContext(ctx, l.opts.leftGrace)
		settled, serr := l.queries.AdmissionSettle(sctx, l.conn, sp)
		cancel()
		if serr == nil {
			return int(settledCount(settled)), nil
		}
		err = wrapDBError(ctx, op+what, serr)
	} else {
		err = errorf("ratelimit: %s%s: %w", op, what, err)
	}
	// The task has finished: released in the background (idempotent), and
	// by Recover should that give up.
	l.giveBackUnheld(func(handedOver time.Time) {
		l.retryUnheld(handedOver, func(ctx context.Context) error {
			_, err := l.queries.AdmissionSettle(ctx, l.conn, sp)
			return err
		})
	})
	return 0, err
}

func finishParams(id, tok pgtype.UUID, out Outcome) (db.TaskFinishParams, error) {
	p := db.TaskFinishParams{TaskID: id, Token: tok, Status: out.Status, Retryable: out.Retryable}
	switch out.Status {
	case TaskSucceeded:
		if set := errorFields(out); set != "" {
			return p, &ValidationError{Field: "Outcome", Value: set + " set",
				Reason: "a succeeded task carries no error: its ErrorCode, ErrorMessage and Error must be empty"}
		}
	case TaskFailed, TaskCancelled:
	default:
		return p, &ValidationError{Field: "Outcome.Status", Value: shown(out.Status), Reason: "must be succeeded, failed or cancelled"}
	}
	if err := validateOptionalText("Outcome.ErrorCode", out.ErrorCode, maxTaskTextBytes); err != nil {
		return p, err
	}
	if err := validateOptionalText("Outcome.ErrorMessage", out.ErrorMessage, maxMessageBytes); err != nil {
		return p, err
	}
	if len(out.Error) > 0 {
		if err := validateJSON("Outcome.Error", out.Error); err != nil {
			return p, err
		}
		e := string(out.Error)
		p.Error = &e
	}
	p.ErrorCode = pgtype.Text{String: out.ErrorCode, Valid: out.ErrorCode != ""}
	p.ErrorMessage = pgtype.Text{String: out.ErrorMessage, Valid: out.ErrorMessage != ""}
	return p, nil
}

// errorFields names the error fields out sets ("ErrorCode, Error"), ""
// when none.
func errorFields(out Outcome) string {
	var set []string
	if out.ErrorCode != "" {
		set = append(set, "ErrorCode")
	}
	if out.ErrorMessage != "" {
		set = append(set, "ErrorMessage")
	}
	if len(out.Error) > 0 {
		set = append(set, "Error")
	}
	return strings.Join(set, ", ")
}
