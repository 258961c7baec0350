package ratelimit

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

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
	// Skipped is true when another process held the recover lease: this
	// call did nothing (the other one is doing the work).
	Skipped bool
}

// Zero reports whether the call changed nothing.
func (r RecoveryResult) Zero() bool {
	r.Skipped = false
	return r == RecoveryResult{}
}

// String summarizes what was given back, for logs and the CLI: every
// count, as Describe says a run that returned no error. After a run that
// returned an error, Describe says it.
func (r RecoveryResult) String() string { return r.describe(stepsFailed{}) }

// Describe says what the run that returned r and err did, as String does,
// unless a step failed (a *StepError in err, however joined and wrapped):
// it then leaves out the counts that stayed 0 because every step feeding
// them failed or did not run (they would read as steps that ran and found
// nothing), and ends naming the failed steps and saying how many the run,
// when it stopped at one, did not reach (its Example's output):
//
//	released 1 reservation; failed 1 attempt; failed 1 sync task; failed steps: reclaim expired tasks; not run: the 8 steps after reclaim expired tasks
//
// The *StepErrors of another job (a Prune's) are not this run's. A count
// that other steps fed too, or that the failed step fed before it failed,
// is said. Describe(nil) is String.
func (r RecoveryResult) Describe(err error) string { return r.describe(failedStepsIn(jobRecover, err)) }

// describe says what the run did, its steps s failed or not run
// (describeClauses).
func (r RecoveryResult) describe(s stepsFailed) string {
	if r.Skipped {
		return "recovery skipped: another process holds the recover lease"
	}
	return describeClauses(r.clauses(), s)
}

// clauses are what a Recover run's line says, each count with the steps
// that add to it: a step added to Recover is added here.
func (r RecoveryResult) clauses() []clause {
	return []clause{
		{verb: "released", sep: " and ", tallies: []tally{
			{"lease", "leases", r.ReleasedConcurrencyLeases, []string{stepReclaim, stepReleaseExpiredLeases, stepReleaseFinishedTaskLeases, stepReleaseFinishedAttemptLeases}},
			{"reservation", "reservations", r.ReleasedRateReservations, []string{stepReclaim, stepReleaseFinishedTaskReservations, stepReleaseFinishedAttemptReservations}},
		}},
		{verb: "failed", tallies: []tally{{"attempt", "attempts", r.FailedAttempts, []string{stepReclaim, stepFailFinishedTaskAttempts}}}},
		{verb: "requeued", tallies: []tally{{"async task", "async tasks", r.RequeuedAsyncTasks, []string{stepReclaim}}}},
		{verb: "failed", sep: " and ", tallies: []tally{
			{"sync task", "sync tasks", r.FailedTasks, []string{stepReclaim}},
			{"poison task", "poison tasks", r.FailedPoisonTasks, []string{stepReclaim}},
		}},
		{verb: "cleaned", tallies: []tally{{"admission", "admissions", r.CleanedTaskAdmissions, []string{stepReclaim, stepDeleteFinishedTaskAdmissions}}}},
		{verb: "returned", tallies: []tally{{"lost allotment", "lost allotments", r.ReturnedAllotments, []string{stepReturnLostAllotments}}}},
	}
}

// The steps of Recover, in order, as StepError.Step, Progress.Step and
// LockWaitError.Step name them.
const (
	stepReclaim                            = "reclaim expired tasks"
	stepReleaseFinishedTaskReservations    = "release reservations of finished tasks"
	stepReleaseExpiredLeases               = "release expired leases"
	stepReleaseFinishedTaskLeases          = "release leases of finished tasks"
	stepFailFinishedTaskAttempts           = "fail attempts of finished tasks"
	stepReleaseFinishedAttemptReservations = "release reservations of finished attempts"
	stepReleaseFinishedAttemptLeases       = "release leases of finished attempts"
	stepDeleteFinishedTaskAdmissions       = "delete admissions of finished tasks"
	stepReturnLostAllotments               = "return lost allotments"
)

// Recover gives back the capacity that dead processes still hold, in bounded
// batches:
//
//  1. running tasks whose execution lease expired: their open reservations
//     are released (execution_lease_expired), their running attempt fails,
//     their unreleased leases are released; an async task is requeued
//     (task.queued event, requeue_count + 1, it keeps its queue places)
//     unless it was already requeued WithMaxRequeues times, in which case
//     it fails for good (requeue_limit_exceeded, task.failed event); a sync
//     task fails (server_restarted, task.failed event). A failed task's
//     queue admissions are deleted. A task whose row another transaction
//     holds (its worker heartbeating or finishing it) is passed over until
//     a later pass, and a lease row so held is left to step 6, so that
//     recovery never waits on a worker's transaction with counter rows
//     locked;
//  2. open reservations of finished tasks are released (task_finished);
//  3. expired, unreleased leases are marked released (expired);
//  4. unreleased leases of finished tasks are released (task_finished);
//  5. attempts still running of finished tasks fail (task_finished);
//  6. open reservations and unreleased leases attached to an attempt that
//     is no longer running are released (attempt_finished): what a dead
//     worker's admission committed after recovery had reclaimed its task
//     (the task lives on, queued again or running another attempt);
//  7. queue admissions of finished tasks are deleted;
//  8. blocks of Local limits whose window ended, and whose holder stopped
//     reporting, more than WithLostAllotmentGrace ago are returned
//     (holder_lost), charging the holder's last report; one whose holder
//     reported since they were found is left to its holder.
//
// Each batch (WithRecoveryBatchSize rows) is its own short transaction that
// leaves the books correct, locking counter rows first (the lock order), so
// recovery never holds locks long and can be interrupted at any point. It
// is idempotent: a second run finds nothing and returns zeros. A task,
// reservation or block whose release the server rejects (its counter
// damaged by hand, which Doctor reports, say) is left as it is and the
// rest of its batch is still done: a rejected batch is retried in halves
// down to the rows rejected on their own. The run returns what it did with
// the server's reasons, one per step that left rows, joined; a step that
// the server rejects whole stops there and the next step runs. Any other
// error (the connection lost) ends the run. Recovery waits for counter rows
// that other transactions hold (the lock order): with
// WithMaintenanceLockTimeout a batch that waited longer rolls back whole,
// is tried once more without the rows whose counter is still held, which
// are left to a later run, and the step goes on (a *LockWaitError
// in the run's error names the step and the rows; a reservation that step
// 2 left so, step 6 passes over rather than wait for it again); without it, a
// transaction left idle with a counter row locked holds the run up until
// ctx ends.
//
// Single flight across processes: a run holds the recover lease (a row of
// gateway_maintenance_leases, renewed as the run goes, see
// WithMaintenanceLeaseTTL); a call while another process holds it returns
// at once with Skipped set, zero counts and no error. No session state is
// involved, so this holds through a transaction-pooling proxy too. A run
// that could not renew its lease in time stops with ErrMaintenanceLeaseLost.
// A run whose release of its lease fails (a *LockWaitError whose
// LeaseRelease is true, when the server gave up waiting for a lock on it)
// leaves the lease held until it expires, unless this Maintenance's next
// run takes it back: the release's error comes in the run's error, after
// the run's own errors when it has any.
//
// Reservations and leases taken without a task id (taskID "") are not
// recovery's, unless they name an attempt that is over (step 6): their
// leases lapse at expiry, their reservations must be settled by the caller
// (they stop mattering when their window ends, and Prune releases them).
func (m *Maintenance) Recover(ctx context.Context) (res RecoveryResult, err error) {
	if err := m.callable(ctx); err != nil {
		return RecoveryResult{}, err
	}
	lease, err := m.takeLease(ctx, jobRecover)
	if err != nil {
		return RecoveryResult{}, takeError(ctx, jobRecover, err)
	}
	if lease == nil {
		return RecoveryResult{Skipped: true}, nil
	}
	defer func() { err = withRelease(ctx, jobRecover, err, lease.release(ctx)) }()

	q, conn, batch, now := m.queries, m.stepConn(), int32(m.opts.recoveryBatchSize), m.opts.clock.at
	var admissionsAfter db.RecoveryAdmissionDeleteForFinishedTasksParams
	admissionsAfter.AfterTaskID = pgtype.UUID{Valid: true} // the nil UUID: before every task
	// A reservation of a finished task that the first release step left on
	// a lock wait is often one of a finished attempt too: the second passes
	// it over rather than wait for the same lock again.
	lockedReservations := map[[16]byte]bool{}
	err = runSteps(ctx, "recover", lease, []step{
		{stepReclaim, m.reclaimExpiredTasks(ctx, batch, &res)},
		{stepReleaseFinishedTaskReservations, m.releaseStep(ctx, batch, lockedReservations, func(n int32) ([]pgtype.UUID, error) {
			return q.RecoveryReservationFindForFinishedTasks(ctx, conn, n)
		}, reasonTaskFinished, &res.ReleasedRateReservations)},
		{stepReleaseExpiredLeases, rowsStep(batch, func(n int32) (int64, error) {
			return q.RecoveryLeaseReleaseExpired(ctx, conn, db.RecoveryLeaseReleaseExpiredParams{BatchSize: n, Now: now()})
		}, &res.ReleasedConcurrencyLeases)},
		{stepReleaseFinishedTaskLeases, rowsStep(batch, func(n int32) (int64, error) {
			return q.RecoveryLeaseReleaseForFinishedTasks(ctx, conn, db.RecoveryLeaseReleaseForFinishedTasksParams{BatchSize: n, Now: now()})
		}, &res.ReleasedConcurrencyLeases)},
		{stepFailFinishedTaskAttempts, rowsStep(batch, func(n int32) (int64, error) {
			return q.RecoveryAttemptFailForFinishedTasks(ctx, conn, db.RecoveryAttemptFailForFinishedTasksParams{BatchSize: n, Now: now()})
		}, &res.FailedAttempts)},
		{stepReleaseFinishedAttemptReservations, m.releaseStep(ctx, batch, lockedReservations, func(n int32) ([]pgtype.UUID, error) {
			return q.RecoveryReservationFindForFinishedAttempts(ctx, conn, n)
		}, reasonAttemptFinished, &res.ReleasedRateReservations)},
		{stepReleaseFinishedAttemptLeases, rowsStep(batch, func(n int32) (int64, error) {
			return q.RecoveryLeaseReleaseForFinishedAttempts(ctx, conn, db.RecoveryLeaseReleaseForFinishedAttemptsParams{BatchSize: n, Now: now()})
		}, &res.ReleasedConcurrencyLeases)},
		{stepDeleteFinishedTaskAdmissions, keysetStep(batch, func(n int32) (int32, error) {
			admissionsAfter.BatchSize = n
			row, err := q.RecoveryAdmissionDeleteForFinishedTasks(ctx, conn, admissionsAfter)
			if err != nil {
				return 0, err
			}
			res.CleanedTaskAdmissions += int64(row.Deleted)
			admissionsAfter.AfterTaskID, admissionsAfter.AfterScopeType, admissionsAfter.AfterScopeKey = row.LastTaskID, row.LastScopeType, row.LastScopeKey
			return row.Scanned, nil
		})},
		{stepReturnLostAllotments, m.returnLostAllotments(ctx, batch, &res.ReturnedAllotments)},
	}, m.progressOf("recover", func(p *Progress) { p.Recovery, p.Summary = res, res.String() }))
	return res, err
}

// returnLostAllotments returns, per batch, the blocks of holders that died,
// charging each holder's last report of what it admitted. The return reads
// that report under the block's lock, and leaves a block whose holder
// reported since the find: it is alive.
func (m *Maintenance) returnLostAllotments(ctx context.Context, batch int32, count *int64) batchFunc {
	grace := m.opts.lostGrace.Seconds()
	find := func(n int32) ([]pgtype.UUID, error) {
		return m.queries.RecoveryAllotmentFindLost(ctx, m.stepConn(), db.RecoveryAllotmentFindLostParams{
			GraceSeconds: grace, BatchSize: n, Now: m.opts.clock.at(),
		})
	}
	return findStep(batch, nil, func(id pgtype.UUID) [16]byte { return id.Bytes }, find, func(lost []pgtype.UUID) (int64, error) {
		rows, err := m.queries.RecoveryAllotmentReturnLost(ctx, m.stepConn(), db.RecoveryAllotmentReturnLostParams{
			Ids: lost, Reason: reasonHolderLost, GraceSeconds: grace, Now: m.opts.clock.at(),
		})
		if err != nil {
			return 0, err
		}
		var n int64
		for _, r := range rows {
			if r.Returned {
				n++
			}
		}
		*count += n
		return n, nil
	})
}

// reclaimExpiredTasks reclaims, per batch, running tasks whose execution
// lease expired (RecoveryTaskFindExpired reads them without locking; each
// batch is one transaction, see reclaimTasks).
func (m *Maintenance) reclaimExpiredTasks(ctx context.Context, batch int32, res *RecoveryResult) batchFunc {
	find := func(n int32) ([]db.RecoveryTaskFindExpiredRow, error) {
		return m.queries.RecoveryTaskFindExpired(ctx, m.stepConn(), db.RecoveryTaskFindExpiredParams{BatchSize: n, Now: m.opts.clock.at()})
	}
	// The tasks of a batch that timed out whose reservations' counters are
	// still held (isolate).
	heldReservations := m.heldReservations(ctx)
	held := func(found []db.RecoveryTaskFindExpiredRow) ([]db.RecoveryTaskFindExpiredRow, error) {
		var rids []pgtype.UUID
		for _, f := range found {
			rids = append(rids, f.OpenReservationIds...)
		}
		if len(rids) == 0 {
			return nil, nil
		}
		h, err := heldReservations(rids)
		if err != nil {
			return nil, err
		}
		locked := map[[16]byte]bool{}
		for _, rid := range h {
			locked[rid.Bytes] = true
		}
		var tasks []db.RecoveryTaskFindExpiredRow
		for _, f := range found {
			if slices.ContainsFunc(f.OpenReservationIds, func(rid pgtype.UUID) bool { return locked[rid.Bytes] }) {
				tasks = append(tasks, f)
			}
		}
		return tasks, nil
	}
	// The tasks a batch left alone (their row held by another transaction,
	// or heartbeated or finished meanwhile): the step's next batches pass
	// them over, as they do the rows of a batch that timed out, so that a
	// batch's worth of held task rows, which every find returns first (the
	// oldest expiries), does not end the step before the expired tasks
	// after them. A later pass takes them once they are free.
	passedOver := map[[16]byte]bool{}
	return findHeldStep(batch, passedOver, func(f db.RecoveryTaskFindExpiredRow) [16]byte { return f.ID.Bytes }, find,
		func(found []db.RecoveryTaskFindExpiredRow) (int64, error) {
			reclaimed, err := m.reclaimTasks(ctx, found, res)
			if err != nil {
				return 0, err
			}
			for _, f := range found {
				if !reclaimed[f.ID.Bytes] {
					passedOver[f.ID.Bytes] = true
				}
			}
			// Every task of the batch is dealt with: reclaimed, or passed over
			// from now on (so the step goes on past a batch that reclaimed none).
			return int64(len(found)), nil
		}, held)
}

// reclaimTasks reclaims the given tasks in one transaction: lock the
// counters of their open reservations (the lock order), reclaim the tasks
// whose lease is still expired (requeue or fail, with attempts, leases,
// admissions and events), then release the reservations of the tasks it
// reclaimed. With WithMaintenanceLockTimeout the transaction waits at most
// that long for each lock. It counts what it did in res once committed, and
// returns the ids of the tasks it reclaimed.
func (m *Maintenance) reclaimTasks(ctx context.Context, found []db.RecoveryTaskFindExpiredRow, res *RecoveryResult) (map[[16]byte]bool, error) {
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := m.boundTx(ctx, tx); err != nil {
		return nil, err
	}

	now := m.opts.clock.at()
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
		queue(b, func(r db.DBTX) { _ = m.queries.CounterLockForReservations(ctx, r, rids) })
	}
	var reclaimed []db.RecoveryTaskReclaimRow
	queueRows(b, &reclaimed, func(r db.DBTX) {
		_, _ = m.queries.RecoveryTaskReclaim(ctx, r, db.RecoveryTaskReclaimParams{TaskIds: taskIDs, MaxRequeues: int32(m.opts.maxRequeues), Now: now})
	})
	if err := runBatch(ctx, tx, b); err != nil {
		return nil, err
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
	// settleChunk reservations per call (see there), all calls in one
	// round trip. Their counters are locked already, by the batch's first
	// statement.
	b = &pgx.Batch{}
	settled := make([][]db.AdmissionSettleRow, (len(release)+settleChunk-1)/settleChunk)
	for k := range settled {
		p := releaseIDs(release[k*settleChunk:min((k+1)*settleChunk, len(release))], reasonExecutionLeaseExpired)
		p.Now = now
		queueRows(b, &settled[k], func(r db.DBTX) { _, _ = m.queries.AdmissionSettle(ctx, r, p) })
	}
	if b.Len() > 0 {
		if err := runBatch(ctx, tx, b); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}

	for _, rows := range settled {
		res.ReleasedRateReservations += settledCount(rows)
	}
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
	return done, nil
}
