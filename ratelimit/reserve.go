package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/decimal"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/internal/textcell"
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

// admission is one validated request for capacity: the limits of one
// Reserve call, split by kind.
type admission struct {
	taskID, attemptID string
	task, attempt     pgtype.UUID
	windows           []windowLimit // in the caller's order
	leases            []leaseLimit
	// wFirst and cFirst are the 0-based positions of the admission's first
	// window and concurrency limit in the call it was appended to; wSent
	// lists its windows (indexes into windows) in the order they were sent.
	wFirst, cFirst int
	wSent          []int
}

func newAdmission(taskID, attemptID string, limits []Limit) (admission, error) {
	task, err := parseOptionalID("TaskID", taskID)
	if err != nil {
		return admission{}, err
	}
	attempt, err := parseOptionalID("AttemptID", attemptID)
	if err != nil {
		return admission{}, err
	}
	if attempt.Valid && !task.Valid {
		// FinishTask and recovery find a task's rows by its id: rows that
		// named the attempt alone stayed open when the task finished.
		return admission{}, &ValidationError{Field: "TaskID", Value: shown(taskID), Reason: "must name the attempt's task when an attempt id is given"}
	}
	windows, leases, err := splitLimits(limits)
	if err != nil {
		return admission{}, err
	}
	return admission{taskID: taskID, attemptID: attemptID, task: task, attempt: attempt, windows: windows, leases: leases}, nil
}

// empty reports an admission with nothing to reserve (every Amount zero).
func (a *admission) empty() bool { return len(a.windows) == 0 && len(a.leases) == 0 }

// lockPhases is the span of the lock order the admission takes locks in.
func (a *admission) lockPhases() (first, last lockPhase) {
	first, last = phaseCounters, phaseCounters
	if len(a.windows) == 0 {
		first = phaseLeaseScopes
	}
	if len(a.leases) > 0 {
		last = phaseLeaseScopes
	}
	return first, last
}

// appendTo adds a to a call of pgadmit_reserve as its next admission.
func (a *admission) appendTo(p *db.AdmissionReserveParams) {
	p.TaskIds = append(p.TaskIds, a.task)
	p.AttemptIds = append(p.AttemptIds, a.attempt)
	n := int32(len(p.TaskIds))
	a.wFirst, a.cFirst = len(p.WAdmission), len(p.CAdmission)
	a.wSent = lockOrder(a.windows)
	for _, i := range a.wSent {
		w := a.windows[i]
		p.WAdmission = append(p.WAdmission, n)
		p.WScopeTypes = append(p.WScopeTypes, w.Limit.Scope.Type)
		p.WScopeKeys = append(p.WScopeKeys, w.Limit.Scope.Key)
		p.WMetrics = append(p.WMetrics, w.Limit.Metric)
		p.WWindowSeconds = append(p.WWindowSeconds, w.windowSeconds)
		p.WLimitValues = append(p.WLimitValues, w.Limit.Limit)
		p.WAmounts = append(p.WAmounts, w.Limit.Amount)
	}
	for _, c := range a.leases {
		p.CAdmission = append(p.CAdmission, n)
		p.CScopeTypes = append(p.CScopeTypes, c.Limit.Scope.Type)
		p.CScopeKeys = append(p.CScopeKeys, c.Limit.Scope.Key)
		p.CLimitValues = append(p.CLimitValues, c.Limit.Limit)
		p.CAmounts = append(p.CAmounts, c.Limit.Amount)
		p.CTtlSeconds = append(p.CTtlSeconds, c.ttlSeconds)
	}
}

// notOneWindow reports an admission that pgadmit_reserve_windows cannot
// take: more or fewer than one window limit, a concurrent limit, or a task.
func (a *admission) notOneWindow() bool {
	return len(a.windows) != 1 || len(a.leases) != 0 || a.task.Valid || a.attempt.Valid
}

// appendWindowTo adds a, an admission of one window limit, to a call of
// pgadmit_reserve_windows as its next admission.
func (a *admission) appendWindowTo(p *db.AdmissionReserveWindowsParams) {
	a.sentAsWindow(len(p.ScopeTypes))
	w := a.windows[0]
	p.ScopeTypes = append(p.ScopeTypes, w.Limit.Scope.Type)
	p.ScopeKeys = append(p.ScopeKeys, w.Limit.Scope.Key)
	p.Metrics = append(p.Metrics, w.Limit.Metric)
	p.WindowSeconds = append(p.WindowSeconds, w.windowSeconds)
	p.LimitValues = append(p.LimitValues, w.Limit.Limit)
	p.Amounts = append(p.Amounts, w.Limit.Amount)
}

// sentAsWindow records that a's one window limit went at 0-based position
// pos of its call.
func (a *admission) sentAsWindow(pos int) {
	a.wFirst, a.cFirst, a.wSent = pos, 0, []int{0}
}

// decide turns the database's decision rows of this admission (one per
// limit, Ord counting in the whole call) into a Grant, or the error that
// explains the refusal.
func (a *admission) decide(rows []db.AdmissionReserveRow) (Grant, error) {
	if len(rows) != len(a.windows)+len(a.leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: %d limits but %d decisions", len(a.windows)+len(a.leases), len(rows))
	}
	if err := refusalError(rows[0].Refusal, a.taskID, a.attemptID); err != nil {
		return Grant{}, err
	}
	grant := Grant{TaskID: a.taskID, AttemptID: a.attemptID, DecidedAt: rows[0].DbNow,
		Reservations: make([]Reservation, len(a.windows)), Leases: make([]Lease, len(a.leases))}
	granted := 0
	var refused *ExceededError
	refusedAt := -1
	refuse := func(e *ExceededError, index int) {
		if refused == nil || index < refusedAt {
			refused, refusedAt = e, index
		}
	}
	for _, row := range rows {
		if row.IsLease {
			i := int(row.Ord) - 1 - a.cFirst
			c := a.leases[i]
			if !row.Fits {
				refuse(leaseExceeded(c, row), c.index)
			}
			if row.GrantID.Valid {
				granted++
				grant.Leases[i] = Lease{
					ID: idString(row.GrantID), ScopeType: c.Limit.Scope.Type, ScopeKey: c.Limit.Scope.Key,
					Amount: c.Limit.Amount, Limit: c.Limit.Limit, TTL: time.Duration(c.ttlSeconds) * time.Second,
					ExpiresAt: row.ResetAt, Remaining: remaining(c.Limit.Limit, row.CurrentValue, 0, c.Limit.Amount),
				}
			}
			continue
		}
		i := a.wSent[int(row.Ord)-1-a.wFirst]
		w := a.windows[i]
		if !row.Fits {
			refuse(windowExceeded(w, row.CurrentValue, row.ReservedValue, row.ResetAt, row.DbNow), w.index)
		}
		if row.GrantID.Valid {
			granted++
			grant.Reservations[i] = Reservation{
				ID: idString(row.GrantID), ScopeType: w.Limit.Scope.Type, ScopeKey: w.Limit.Scope.Key,
				Metric: w.Limit.Metric, Window: time.Duration(w.windowSeconds) * time.Second,
				WindowStart: row.WindowStart, ResetAt: row.ResetAt, Limit: w.Limit.Limit, Amount: w.Limit.Amount,
				Remaining: remaining(w.Limit.Limit, row.CurrentValue, row.ReservedValue, w.Limit.Amount),
				index:     w.index,
			}
		}
	}
	if refused != nil {
		return Grant{}, refused
	}
	if granted != len(a.windows)+len(a.leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: admitted without a grant for every limit")
	}
	return grant, nil
}

// lockOrder returns the indexes of windows sorted in the lock order of
// their counters: scope type, scope key and metric in byte order, then
// window length. pgadmit_reserve takes limits that come in this order
// without sorting them itself.
func lockOrder(windows []windowLimit) []int {
	order := make([]int, len(windows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return windows[i].counter().compare(windows[j].counter()) })
	return order
}

// counter names the counter the limit draws on.
func (w windowLimit) counter() counterKey {
	return counterKey{w.Limit.Scope.Type, w.Limit.Scope.Key, w.Limit.Metric, w.windowSeconds}
}

// scopeKey names the concurrency scope a lease limit takes a slot of, as a
// key that no window counter has (no window limit has the metric
// "concurrent"), so that sharesCounter can tell it apart from them.
func (c leaseLimit) scopeKey() counterKey {
	return counterKey{scopeType: c.Limit.Scope.Type, scopeKey: c.Limit.Scope.Key, metric: MetricConcurrent}
}

// windowExceeded explains a window limit that did not fit. Its message
// shows the metric and the scope as Doctor and inspect do (textcell): a
// space or a newline of them must not split the caller's log line.
func windowExceeded(w windowLimit, used, reserved float64, resetAt, dbNow time.Time) *ExceededError {
	l := w.Limit
	current := decimal.Of(used).Plus(decimal.Of(reserved)) // numeric's sum: 0.1 + 0.2 is 0.3
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: current.Approx(), Used: used, Reserved: reserved, Projected: current.Plus(decimal.Of(l.Amount)).Approx(),
		WindowSeconds: int(w.windowSeconds), ResetAt: resetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: %s amount %s is greater than limit %s on %s", textcell.Show(l.Metric),
			amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
		return e
	}
	e.Retryable = true
	e.RetryAfter = max(resetAt.Sub(dbNow), time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: %s window of %s has %s of %s left, %s needed; retry after %s",
		textcell.Show(l.Metric), l.Scope.text(), e.RemainingText(), amounttext.Full(l.Limit),
		amounttext.Full(l.Amount), e.RetryAfter.Round(time.Second))
	return e
}

// leaseExceeded explains a concurrent limit that did not fit.
func leaseExceeded(c leaseLimit, row db.AdmissionReserveRow) *ExceededError {
	l := c.Limit
	active := row.CurrentValue
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: active, Used: active, Projected: decimal.Of(active).Plus(decimal.Of(l.Amount)).Approx(),
		ResetAt: row.ResetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: concurrent amount %s is greater than limit %s on %s",
			amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
		return e
	}
	e.Retryable = true
	e.RetryAfter = min(max(row.ResetAt.Sub(row.DbNow), time.Second), 5*time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: concurrent active %s plus request %s is greater than limit %s on %s",
		amounttext.Full(active), amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
	return e
}

// refusalError turns pgadmit_reserve's precondition refusal into an error.
func refusalError(refusal, taskID, attemptID string) error {
	switch refusal {
	case "":
		return nil
	case "isolation":
		return errorf("ratelimit: reserve: %w", ErrIsolation)
	case "unknown_task":
		return errorf("ratelimit: reserve: task %s: %w", taskID, ErrUnknownTask)
	case "unknown_attempt":
		return errorf("ratelimit: reserve: attempt %s of task %s: %w", attemptID, taskID, ErrUnknownTask)
	case "task_finished":
		return errorf("ratelimit: reserve: task %s: %w", taskID, ErrTaskFinished)
	case "attempt_finished":
		return errorf("ratelimit: reserve: attempt %s: %w", attemptID, ErrTaskFinished)
	}
	return fmt.Errorf("ratelimit: reserve: refused (%s)", refusal)
}

// sqlstateTaskFinished is raised by pgadmit_task_recheck: the task of an
// admission finished while the admission was decided (a FinishTask that
// it waited for), and the statement was rolled back. A combined batch
// that meets it is run again one request at a time (rejectedInput), and
// the request for the finished task is then refused by the task check.
const sqlstateTaskFinished = "P0T01"

// wrapDBError names the operation and maps foreign-key violations (a task or
// attempt id that names no row) to ErrUnknownTask, an admission whose task
// finished while it was decided to ErrTaskFinished, and the errors of pgx's
// statement cache behind a transaction pooler, and a statement-pooling
// proxy refusing a transaction, to a *PoolerError. A statement the server
// cancelled because ctx ended (57014, on a pool set up with ConfigurePool)
// also matches ctx's error, as with pgx's default, which gives up the
// connection instead. The
// server's error stays in the chain: the combiner reads its code
// (rejectedInput) to tell a batch that one request's input broke, run
// again one request at a time, from one that failed for all of them.
func wrapDBError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57014": // query_canceled: by ctx's cancel request, or by a statement_timeout
			if cerr := ctx.Err(); cerr != nil {
				return errorf("ratelimit: %s: %w: %w", op, cerr, err)
			}
		case "23503": // foreign_key_violation
			return errorf("ratelimit: %s: %w (%s): %w", op, ErrUnknownTask, pgErr.ConstraintName, err)
		case "40001": // serialization_failure: only possible above READ COMMITTED
			return errorf("ratelimit: %s: %w: %w", op, ErrIsolation, err)
		case sqlstateTaskFinished:
			return errorf("ratelimit: %s: %w: %w", op, ErrTaskFinished, err)
		case "26000", "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
			if poolerr.StatementCacheLost(err) {
				return &PoolerError{Mode: "cache_statement", Cause: err, op: op}
			}
		case "08P01": // protocol_violation: a statement-pooling proxy refusing a transaction block
			if poolerr.StatementPooling(err) {
				return &PoolerError{StatementPooling: true, Cause: err, op: op}
			}
		}
	}
	return errorf("ratelimit: %s: %w", op, err)
}
