package ratelimit

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pgadmit/pgadmit/db"
)

// Reserve admits a request against every limit, all or nothing, and
// returns a Grant of what it took: window limits reserve their Amount in
// the current window, concurrent limits take a lease. Settle the grant with
// Commit (what was used) or Release (unused) when the request is over.
//
// When any limit does not fit, the error is an *ExceededError for the
// first limit (in the caller's order) that did not fit, and no counter
// value, reservation or lease is written. The counter rows of windows that
// had none may be left behind, empty, when the call had several limits or
// was combined with concurrent calls: the statement creates them to lock
// them before it decides (Prune deletes them with their window).
//
// taskID and attemptID are optional UUIDs ("" for none); an attempt id
// needs its task's id (a *ValidationError on TaskID otherwise). A task id
// lets FinishTask settle the grant and Recover give the capacity back when
// the task's process dies. Reserve refuses with ErrTaskFinished a task that
// is finished or an attempt that no longer runs, and with ErrUnknownTask
// an id that names no row. As for a refusal, nothing is written then (a
// call of several limits may leave empty counter rows behind, as a refused
// one may), also when FinishTask finished the task while the admission was
// decided: the task is checked again once the rows are written, under a
// lock that FinishTask waits for, and the statement is then rolled back.
// Inside a caller's transaction (WithTx) the two differ: a task already
// finished when Reserve starts is refused and the transaction goes on, but
// one finished while the admission was decided fails the statement
// (SQLSTATE P0T01, the server's *pgconn.PgError in the error's chain),
// which ends the transaction, as any failed statement does: roll it back.
// An admission with nothing to reserve (no limits, or every Amount 0)
// sends nothing and checks no task: it returns an empty Grant with the ids
// given and a zero DecidedAt.
//
// Cost: one round trip, one statement (a call of pgadmit_reserve, or of a
// cheaper function for a common shape), in which counter rows are locked in
// a global order (no deadlocks whatever order callers list limits in) and
// held only while the server executes it. A Reserve whose limits were all
// admitted from Local blocks sends nothing, or, for a task, one read that
// locks nothing (see Limit.Local).
//
// Cancelling: when ctx ends before the call returns, Reserve returns ctx's
// error and the caller holds nothing. A request not yet sent is never
// sent. A caller whose request is combined with others returns when ctx
// ends; a caller alone in its statement, combined or not, returns once the
// statement is answered, not waiting for the release described next.
//
// A statement once sent is not cancelled for the caller: the server may
// already have committed it, and only its answer names the grants. It runs
// to its answer, and what it granted the caller who left is released
// (reason "abandoned") in the background, tried again for up to 2 s while
// it fails (Limiter.Close waits for such releases; on a single connection
// it is done before Reserve returns). A statement still unanswered 100 ms
// after all its callers left (stuck behind a row lock, say) is cancelled.
// On a pool set up with ConfigurePool, pgx sends the server a cancel
// request and reads the answer: the statement is rolled back, or it
// committed and what it granted is released. With pgx's default, pgx gives
// the connection up at once and never reads the answer, and a statement
// the server committed before the request landed (its lock released in
// that moment, say) leaves what it granted to lapse as after a lost
// connection (reservations with their window, leases at their TTL).
// Inside a caller's transaction (WithTx), a cancelled statement ends the
// transaction, and what it did is rolled back with it.
func (l *Limiter) Reserve(ctx context.Context, taskID, attemptID string, limits []Limit) (Grant, error) {
	if err := l.callable(ctx); err != nil {
		return Grant{}, err
	}
	a, err := newAdmission(taskID, attemptID, limits)
	if err != nil {
		return Grant{}, err
	}
	local := l.takeLocal(ctx, &a)
	if a.empty() {
		if err := l.fenceLocal(ctx, &a, local); err != nil {
			giveBack(local)
			return Grant{}, err
		}
		return localGrant(taskID, attemptID, local, l.allot), nil
	}
	g, err := l.reserveRemote(ctx, &a)
	if err != nil {
		giveBack(local)
		return Grant{}, err
	}
	return withLocal(g, local), nil
}

// reserveRemote decides the admission's limits in the database: combined
// with concurrent calls, or alone (inside a caller's transaction, or
// WithoutCombining).
func (l *Limiter) reserveRemote(ctx context.Context, a *admission) (Grant, error) {
	if l.reserves != nil {
		return l.reserves.do(ctx, a)
	}
	first, last := a.lockPhases()
	if err := l.enter("Reserve", first, last); err != nil {
		return Grant{}, err
	}
	return l.reserveAlone(ctx, a)
}

// reserveAlone sends one admission as its own statement, which runs to its
// answer once sent, as a combined one does (sendContext): when ctx ends
// meanwhile, what it granted is released in the background and the caller
// gets ctx's error.
// It is cancelled leftStatementGrace after ctx ended if still unanswered.
// Inside a caller's transaction it runs in ctx (runToAnswer).
func (l *Limiter) reserveAlone(ctx context.Context, a *admission) (Grant, error) {
	return runToAnswer(l, ctx, func(sctx context.Context) (Grant, error) {
		grants, errs, err := l.reserveBatch(sctx, []*admission{a})
		if err != nil {
			return Grant{}, err
		}
		return grants[0], errs[0]
	}, l.releaseAbandoned)
}

// runToAnswer runs op, the statement of a caller alone, in
// statementContext: once sent, it runs to its answer when ctx ends
// meanwhile, since the server may have committed it and only its answer
// names what it did. When ctx ended before that answer was read, what op
// obtained goes to abandon (nobody holds it), which runs in the background
// (giveBackUnheld), and the caller gets ctx's error without waiting for
// it. A ctx already over sends nothing. Inside a caller's transaction
// (WithTx) op runs in ctx as it is: a statement cancelled there ends the
// transaction, and what it did is rolled back with it. Reserve, CreateTask
// and ClaimTask share it.
func runToAnswer[T any](l *Limiter, ctx context.Context, op func(context.Context) (T, error), abandon func(T, time.Time)) (T, error) {
	if l.inTx {
		return op(ctx)
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	sctx, cancel := statementContext(ctx, l.opts.leftGrace)
	res, err := op(withCallers(sctx, func() bool { return ctx.Err() == nil }))
	cancel()
	if ctx.Err() != nil {
		if err == nil {
			l.giveBackUnheld(func(handedOver time.Time) { abandon(res, handedOver) })
		}
		return zero, ctx.Err()
	}
	return res, err
}

// statementContext is the context a statement of a caller alone runs in:
// ctx's values, without its cancellation or deadline, cancelled grace
// after ctx ends. cancel ends it once the statement is answered. A ctx
// that cannot end is used as it is.
func statementContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	sctx, cancelStatement := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancelStatement) })
	return sctx, func() {
		stop()
		cancelStatement()
	}
}

// reserveBatch decides admissions in one statement, in order: a grant or an
// error for each, or an error for the whole call. A statement that failed
// before any of it reached the server is sent once more (resendsUnsent).
func (l *Limiter) reserveBatch(ctx context.Context, batch []*admission) ([]Grant, []error, error) {
	return sendOnceMoreIfUnsent(l, ctx, func() ([]Grant, []error, error) { return l.reserveStatement(ctx, batch) })
}

// reserveStatement sends reserveBatch's statement once. A statement that
// was sent and lost its answer counts as lost (countLost), unless it was a
// hot batch whose rows name what it granted, which is released.
func (l *Limiter) reserveStatement(ctx context.Context, batch []*admission) ([]Grant, []error, error) {
	ctx, cut := withCutMark(ctx)
	if len(batch) == 1 && len(batch[0].windows) == 1 && len(batch[0].leases) == 0 {
		g, err := l.reserveOne(ctx, batch[0])
		if err != nil && !isDecision(err) {
			l.countLost(1, err, cut.Load())
			return nil, nil, err
		}
		return []Grant{g}, []error{err}, nil
	}
	rows, err := l.reserveRows(ctx, batch)
	if err != nil {
		if len(rows) > 0 {
			l.releaseUnconfirmed(rows) // rows only from a hot batch whose commit is unconfirmed
		} else {
			l.countLost(len(batch), err, cut.Load())
		}
		return nil, nil, wrapDBError(ctx, "reserve", err)
	}
	byAdmission := make([][]db.AdmissionReserveRow, len(batch))
	for _, row := range rows {
		if i := int(row.Admission) - 1; i >= 0 && i < len(batch) {
			byAdmission[i] = append(byAdmission[i], row)
		}
	}
	grants, errs := make([]Grant, len(batch)), make([]error, len(batch))
	for i, a := range batch {
		grants[i], errs[i] = a.decide(byAdmission[i])
	}
	return grants, errs, nil
}

// reserveRows sends a batch to the database: to pgadmit_reserve_windows
// when every admission is one window limit without a task (it takes what a
// batch asks of a counter in one statement where that fits whole), else to
// pgadmit_reserve. The rows are the same either way. A batch on a hot
// counter or concurrency scope is committed by a procedure sent after it
// (hotbatch.go); when that fails after the batch answered, the rows come
// back with the error.
func (l *Limiter) reserveRows(ctx context.Context, batch []*admission) ([]db.AdmissionReserveRow, error) {
	hot := l.hotBatches() && hotAdmissions(batch)
	if !slices.ContainsFunc(batch, (*admission).notOneWindow) {
		var p db.AdmissionReserveWindowsParams
		for _, a := range batch {
			a.appendWindowTo(&p)
		}
		if hot {
			return l.hotReserveRows(ctx, func(q db.DBTX) {
				_, _ = l.queries.AdmissionReserveWindows(ctx, q, p)
			})
		}
		rows, err := l.queries.AdmissionReserveWindows(ctx, l.conn, p)
		decisions := make([]db.AdmissionReserveRow, len(rows))
		for i, row := range rows {
			decisions[i] = db.AdmissionReserveRow(row)
		}
		return decisions, err
	}
	var p db.AdmissionReserveParams
	for _, a := range batch {
		a.appendTo(&p)
	}
	if hot {
		return l.hotReserveRows(ctx, func(q db.DBTX) {
			_, _ = l.queries.AdmissionReserve(ctx, q, p)
		})
	}
	return l.queries.AdmissionReserve(ctx, l.conn, p)
}

// reserveOne decides an admission of one window limit with the scalar
// pgadmit_reserve_one: one statement does it all.
func (l *Limiter) reserveOne(ctx context.Context, a *admission) (Grant, error) {
	w := a.windows[0]
	row, err := l.queries.AdmissionReserveOne(ctx, l.conn, db.AdmissionReserveOneParams{
		TaskID: a.task, AttemptID: a.attempt,
		ScopeType: w.Limit.Scope.Type, ScopeKey: w.Limit.Scope.Key, Metric: w.Limit.Metric,
		WindowSeconds: w.windowSeconds, LimitValue: w.Limit.Limit, Amount: w.Limit.Amount,
	})
	if err != nil {
		return Grant{}, wrapDBError(ctx, "reserve", err)
	}
	a.sentAsWindow(0)
	return a.decide([]db.AdmissionReserveRow{{
		Admission: 1, Ord: 1, Fits: row.Fits, GrantID: row.GrantID,
		CurrentValue: row.CurrentValue, ReservedValue: row.ReservedValue,
		WindowStart: row.WindowStart, ResetAt: row.ResetAt, DbNow: row.DbNow, Refusal: row.Refusal,
	}})
}

// isDecision reports an error that is an admission's own outcome (a
// refusal), not a failure of the call.
func isDecision(err error) bool {
	return errors.Is(err, ErrExceeded) || errors.Is(err, ErrIsolation) ||
		errors.Is(err, ErrUnknownTask) || errors.Is(err, ErrTaskFinished)
}

// releaseAbandoned gives back what a Reserve granted after its caller had
// stopped waiting (its context ended): nobody holds the grant.
func (l *Limiter) releaseAbandoned(g Grant, handedOver time.Time) {
	l.releaseUnheld(g, reasonAbandoned, handedOver)
}

const (
	// reasonAbandoned is recorded on a grant released because the caller
	// of Reserve was gone when it was decided.
	reasonAbandoned = "abandoned"
	// reasonUnconfirmed is recorded on a grant that a hot batch decided and
	// whose commit could not be confirmed; its caller was told Reserve
	// failed (releaseUnconfirmed).
	reasonUnconfirmed       = "unconfirmed"
	abandonedReleaseTimeout = 30 * time.Second
)
