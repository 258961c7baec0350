package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// ErrOwnTransactions is returned by Recover and Prune on a Limiter bound to a
// caller's transaction (WithTx, or New over a pgx.Tx): they commit work in
// many short transactions of their own, and Recover holds a session lock.
var ErrOwnTransactions = errors.New("ratelimit: Recover and Prune run their own short transactions; call them on a Limiter over a pool or connection, not a transaction")

// ErrNoSession is matched (errors.Is) by every *SessionError.
var ErrNoSession = errors.New("ratelimit: Recover needs one connection for its whole run")

// SessionError refuses Recover on a Limiter whose Executor cannot give it
// one connection for the whole run. Recover holds a session advisory lock
// (single flight) and must unlock it on the connection that took it; an
// Executor that sends each statement to whichever pooled connection is free
// would lock on one and unlock on another, leaving the lock held and every
// later recovery skipped. Recover accepts a *pgxpool.Pool, a *pgxpool.Conn,
// a *pgx.Conn, or any type with an Acquire(ctx) (*pgxpool.Conn, error)
// method (a wrapper around a pool). Nothing was run.
type SessionError struct {
	// Executor is the Go type of the refused Executor, as %T prints it.
	Executor string
}

// Error names the refused type and what would be accepted.
func (e *SessionError) Error() string {
	return fmt.Sprintf("ratelimit: Recover cannot pin one connection on a %s: use a *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn, or a type with Acquire(ctx) (*pgxpool.Conn, error)", e.Executor)
}

// Is makes errors.Is(err, ErrNoSession) true.
func (e *SessionError) Is(target error) bool { return target == ErrNoSession }

// Reasons recorded on what recovery releases.
const (
	reasonExecutionLeaseExpired = "execution_lease_expired"
	reasonTaskFinished          = "task_finished"
	reasonAttemptFinished       = "attempt_finished"
)

// RecoveryResult counts what one Recover call gave back. All counts are
// zero when there was nothing to do, and when another process was
// recovering at the same time (Skipped).
type RecoveryResult struct {
	// ReleasedConcurrencyLeases: unreleased leases of reclaimed tasks, of
	// finished tasks and of finished attempts, and expired leases.
	ReleasedConcurrencyLeases int64
	// ReleasedRateReservations: open reservations of reclaimed tasks, of
	// finished tasks and of finished attempts, given back to their counters.
	ReleasedRateReservations int64
	// FailedAttempts: running attempts of reclaimed tasks
	// (execution_lease_expired) and of finished tasks (task_finished).
	FailedAttempts int64
	// FailedTasks: sync tasks whose execution lease expired, failed with
	// server_restarted.
	FailedTasks int64
	// RequeuedAsyncTasks: async tasks whose execution lease expired, queued
	// again (they keep their queue places).
	RequeuedAsyncTasks int64
	// FailedPoisonTasks: async tasks whose execution lease expired after the
	// maximum number of requeues (WithMaxRequeues), failed for good with
	// requeue_limit_exceeded.
	FailedPoisonTasks int64
	// CleanedTaskAdmissions: queue admissions of failed or finished tasks.
	CleanedTaskAdmissions int64
	// ReturnedAllotments: blocks of Local limits whose holder died (their
	// window ended and their holder stopped reporting), returned charging
	// the holder's last report.
	ReturnedAllotments int64
	// Skipped is true when another process held the recovery lock: this
	// call did nothing (the other one is doing the work).
	Skipped bool
}

// Zero reports whether the call changed nothing.
func (r RecoveryResult) Zero() bool {
	r.Skipped = false
	return r == RecoveryResult{}
}

// String summarizes what was given back, for logs and the CLI.
func (r RecoveryResult) String() string {
	if r.Skipped {
		return "recovery skipped: another process holds the recovery lock"
	}
	return fmt.Sprintf("released %d leases and %d reservations; failed %d attempts; requeued %d async tasks; failed %d sync and %d poison tasks; cleaned %d admissions; returned %d lost allotments",
		r.ReleasedConcurrencyLeases, r.ReleasedRateReservations, r.FailedAttempts, r.RequeuedAsyncTasks,
		r.FailedTasks, r.FailedPoisonTasks, r.CleanedTaskAdmissions, r.ReturnedAllotments)
}

// Recover gives back the capacity that dead processes still hold, as the
// reference's RecoverInterruptedRuntimeState does, in bounded batches:
//
//  1. running tasks whose execution lease expired: their open reservations
//     are released (execution_lease_expired), their running attempt fails,
//     their unreleased leases are released; an async task is requeued
//     (task.queued event, requeue_count + 1, it keeps its queue places)
//     unless it was already requeued WithMaxRequeues times, in which case
//     it fails for good (requeue_limit_exceeded, task.failed event); a sync
//     task fails (server_restarted, task.failed event). A failed task's
//     queue admissions are deleted;
//  2. open reservations of finished tasks are released (task_finished);
//  3. expired, unreleased leases are marked released (expired);
//  4. unreleased leases of finished tasks are released (task_finished);
//  5. attempts still running of finished tasks fail (task_finished);
//  6. open reservations and unreleased leases attached to an attempt that
//     is no longer running are released (attempt_finished): what a dead
//     worker's admission committed after recovery had reclaimed its task
//     (the task lives on, queued again or running another attempt);
//  7. queue admissions of finished tasks are deleted.
//
// Each batch (WithRecoveryBatchSize rows) is its own short transaction that
// leaves the books correct, locking counter rows first (the lock order), so
// recovery never holds locks long and can be interrupted at any point. It
// is idempotent: a second run finds nothing and returns zeros.
//
// Single flight across processes: Recover holds a session advisory lock on
// one connection for the whole run; a concurrent call from another process
// or pool returns at once with Skipped set, zero counts and no error. The
// Limiter's Executor must be able to give it that one connection: a
// *pgxpool.Pool or any type with an Acquire(ctx) (*pgxpool.Conn, error)
// method (the connection is acquired for the run), or a *pgxpool.Conn or
// *pgx.Conn (used as is, and left open); anything else is a *SessionError.
//
// Reservations and leases taken without a task id (taskID "") are not
// recovery's, unless they name an attempt that is over (step 6): their
// leases lapse at expiry, their reservations must be settled by the caller
// (they stop mattering when their window ends). Not available on a Limiter bound to a transaction
// (ErrOwnTransactions).
func (l *Limiter) Recover(ctx context.Context) (res RecoveryResult, err error) {
	conn, done, err := l.session(ctx)
	if err != nil {
		return RecoveryResult{}, err
	}
	acquired, err := l.queries.RecoveryLockTry(ctx, conn)
	if err != nil {
		done(true)
		return RecoveryResult{}, wrapDBError("recover: lock", err)
	}
	if !acquired {
		done(false)
		return RecoveryResult{Skipped: true}, nil
	}
	defer func() {
		// Unlock even when ctx was cancelled; a connection that cannot
		// unlock is closed, which releases the lock with the session.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		released, uerr := l.queries.RecoveryUnlock(uctx, conn)
		if uerr == nil && !released {
			uerr = errors.New("the recovery lock was not held")
		}
		done(uerr != nil)
		if uerr != nil && err == nil {
			err = wrapDBError("recover: unlock", uerr)
		}
	}()

	batch := int32(l.opts.recoveryBatchSize) // clamped to int4 by its option
	err = runSteps(ctx, "recover", []step{
		{"reclaim expired tasks", func() (bool, error) { return l.recoverExpiredTasks(ctx, conn, batch, &res) }},
		{"release reservations of finished tasks", l.releaseStep(ctx, conn, batch,
			l.queries.RecoveryReservationFindForFinishedTasks, reasonTaskFinished, &res.ReleasedRateReservations)},
		{"release expired leases", rowsStep(ctx, conn, batch, l.queries.RecoveryLeaseReleaseExpired, &res.ReleasedConcurrencyLeases)},
		{"release leases of finished tasks", rowsStep(ctx, conn, batch, l.queries.RecoveryLeaseReleaseForFinishedTasks, &res.ReleasedConcurrencyLeases)},
		{"fail attempts of finished tasks", rowsStep(ctx, conn, batch, l.queries.RecoveryAttemptFailForFinishedTasks, &res.FailedAttempts)},
		{"release reservations of finished attempts", l.releaseStep(ctx, conn, batch,
			l.queries.RecoveryReservationFindForFinishedAttempts, reasonAttemptFinished, &res.ReleasedRateReservations)},
		{"release leases of finished attempts", rowsStep(ctx, conn, batch, l.queries.RecoveryLeaseReleaseForFinishedAttempts, &res.ReleasedConcurrencyLeases)},
		{"delete admissions of finished tasks", rowsStep(ctx, conn, batch, l.queries.RecoveryAdmissionDeleteForFinishedTasks, &res.CleanedTaskAdmissions)},
		{"return lost allotments", l.returnLostAllotments(ctx, conn, batch, &res.ReturnedAllotments)},
	})
	return res, err
}

// returnLostAllotments returns, per batch, the blocks of holders that died,
// charging each holder's last report of what it admitted.
func (l *Limiter) returnLostAllotments(ctx context.Context, conn Executor, batch int32, count *int64) func() (bool, error) {
	return func() (bool, error) {
		lost, err := l.queries.RecoveryAllotmentFindLost(ctx, conn, db.RecoveryAllotmentFindLostParams{
			GraceSeconds: l.opts.lostGrace.Seconds(), BatchSize: batch,
		})
		if err != nil || len(lost) == 0 {
			return false, err
		}
		p := db.AllotmentReturnParams{}
		for _, a := range lost {
			p.Ids = append(p.Ids, a.ID)
			p.Used = append(p.Used, a.Consumed)
			p.Reasons = append(p.Reasons, reasonHolderLost)
		}
		rows, err := l.queries.AllotmentReturn(ctx, conn, p)
		if err != nil {
			return false, err
		}
		n := 0
		for _, r := range rows {
			if r.Returned {
				n++
			}
		}
		*count += int64(n)
		return len(lost) == int(batch) && n > 0, nil
	}
}

// recoverExpiredTasks reclaims one batch of running tasks whose execution
// lease expired, in one transaction: lock the counters of their open
// reservations, reclaim the tasks (requeue or fail, with attempts, leases,
// admissions and events), then release the reservations of the tasks it
// reclaimed.
func (l *Limiter) recoverExpiredTasks(ctx context.Context, conn Executor, batch int32, res *RecoveryResult) (bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()

	found, err := l.queries.RecoveryTaskFindExpired(ctx, tx, batch)
	if err != nil || len(found) == 0 {
		return false, err
	}
	taskIDs := make([]pgtype.UUID, len(found))
	var rids []pgtype.UUID
	owner := map[[16]byte]int{}
	for i, f := range found {
		taskIDs[i] = f.ID
		for _, rid := range f.OpenReservationIds {
			rids = append(rids, rid)
			owner[rid.Bytes] = i
		}
	}

	b := &pgx.Batch{}
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, rids) })
	}
	var reclaimed []db.RecoveryTaskReclaimRow
	queueRows(b, &reclaimed, func(r db.DBTX) {
		_, _ = l.queries.RecoveryTaskReclaim(ctx, r, db.RecoveryTaskReclaimParams{TaskIds: taskIDs, MaxRequeues: int32(l.opts.maxRequeues)})
	})
	if err := runBatch(ctx, tx, b); err != nil {
		return false, err
	}

	// Release only the reservations of tasks this batch reclaimed: a task
	// left alone (finished or heartbeated meanwhile) keeps what it holds.
	done := make(map[[16]byte]bool, len(reclaimed))
	for _, r := range reclaimed {
		done[r.ID.Bytes] = true
	}
	var release []pgtype.UUID
	for _, rid := range rids {
		if done[found[owner[rid.Bytes]].ID.Bytes] {
			release = append(release, rid)
		}
	}
	var settled []db.AdmissionSettleRow
	if len(release) > 0 {
		settled, err = l.queries.AdmissionSettle(ctx, tx,
			releaseIDs(release, reasonExecutionLeaseExpired))
		if err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}

	res.ReleasedRateReservations += settledCount(settled)
	for _, r := range reclaimed {
		res.FailedAttempts += int64(r.FailedAttempts)
		res.ReleasedConcurrencyLeases += int64(r.ReleasedLeases)
		res.CleanedTaskAdmissions += int64(r.DeletedAdmissions)
		switch {
		case r.Status == TaskQueued:
			res.RequeuedAsyncTasks++
		case r.AsyncMode:
			res.FailedPoisonTasks++
		default:
			res.FailedTasks++
		}
	}
	// A full batch means there may be more. A full batch of which nothing
	// could be reclaimed means other processes changed those tasks under
	// us: stop rather than spin; the next run takes what is left.
	return len(found) == int(batch) && len(reclaimed) > 0, nil
}

// session returns one connection to run a whole recovery on (it holds the
// session lock, and must unlock it on the same connection), and a function
// that gives it back; broken closes a connection Recover acquired. A
// connection the caller handed in is the session itself and stays the
// caller's: it is neither released nor closed.
func (l *Limiter) session(ctx context.Context) (Executor, func(broken bool), error) {
	if err := l.ownTransactions(); err != nil {
		return nil, nil, err
	}
	switch c := l.conn.(type) {
	case interface {
		Acquire(context.Context) (*pgxpool.Conn, error)
	}: // *pgxpool.Pool, or a wrapper around one
		pc, err := c.Acquire(ctx)
		if err != nil {
			return nil, nil, wrapDBError("recover: acquire connection", err)
		}
		return pc, func(broken bool) {
			if broken {
				_ = pc.Hijack().Close(context.Background())
				return
			}
			pc.Release()
		}, nil
	case *pgxpool.Conn, *pgx.Conn:
		return c, func(bool) {}, nil
	default:
		return nil, nil, &SessionError{Executor: fmt.Sprintf("%T", l.conn)}
	}
}

// ownTransactions refuses a Limiter bound to a transaction.
func (l *Limiter) ownTransactions() error {
	if _, isTx := l.conn.(pgx.Tx); l.inTx || isTx {
		return ErrOwnTransactions
	}
	return nil
}
