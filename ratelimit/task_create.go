package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/plural"
)

// CreateTask creates a task together with its queue admissions, all or
// nothing. When a queue_size scope already holds Limit unfinished tasks the
// error is an *ExceededError with Metric "queue_size" (Current is how many
// the scope holds; RetryAfter is zero: a place frees when some task
// finishes, which cannot be predicted) and nothing is written.
//
// An async task is returned queued. A sync task is returned running, with
// its first attempt, execution token and lease (Worker, LeaseTTL): pass the
// token to HeartbeatTask and FinishTask.
//
// Exact under concurrency: creation takes a transaction-scoped advisory
// lock per queue scope (in a global order), then counts and inserts in one
// statement. One round trip. Inside a caller's transaction (WithTx) it may
// follow a Reserve but not precede one (the lock order; see WithTx).
//
// Cancelling works as for Reserve: when ctx ends before the call returns,
// CreateTask returns ctx's error, and the caller has no task. A request
// not yet sent is never sent. A statement once sent runs to its answer
// (the server may have created the task, and only the answer names it),
// and a task it created for the caller who left is cancelled (error code
// "abandoned", a task.cancelled event; its queue places free again): in
// the background, CreateTask returning ctx's error once the statement is
// answered (Limiter.Close waits for the cancelling; on a single
// connection it is done before CreateTask returns). Unless a worker
// claimed the async task first, nothing runs it. A statement still
// unanswered 100 ms after ctx ended (waiting for a queue scope's lock,
// say) is cancelled, and rolled back unless the server committed it
// first; a task created so, or one whose cancelling still fails after 2 s
// of tries (a failed try, on a connection a restart ended, say, is tried
// again), lasts as one whose creator died: a sync task until
// Recover fails it at the end of its execution lease, an async task until
// a worker claims it. Inside a caller's transaction (WithTx), a cancelled
// statement ends the transaction, and the task is rolled back with it.
func (l *Limiter) CreateTask(ctx context.Context, spec TaskSpec) (Task, error) {
	if err := l.callable(ctx); err != nil {
		return Task{}, err
	}
	p, queueLimits, err := taskCreateParams(spec)
	if err != nil {
		return Task{}, err
	}
	p.Now = l.opts.clock.at()
	first := phaseRows // a task without queue limits only inserts new rows
	if len(queueLimits) > 0 {
		first = phaseQueueScopes
	}
	if err := l.enter("CreateTask", first, first); err != nil {
		return Task{}, err
	}
	create := func(ctx context.Context) (Task, error) { return l.createTask(ctx, spec, p, queueLimits) }
	return runToAnswer(l, ctx, create, l.cancelAbandonedTask)
}

// createTask sends TaskCreate, after the queue scopes' locks, in one round
// trip.
func (l *Limiter) createTask(ctx context.Context, spec TaskSpec, p db.TaskCreateParams, queueLimits []Limit) (Task, error) {
	b := &pgx.Batch{}
	if len(queueLimits) > 0 {
		queue(b, func(r db.DBTX) {
			_ = l.queries.TaskAdmissionLockScopes(ctx, r, db.TaskAdmissionLockScopesParams{LockPrefix: l.opts.lockPrefix, ScopeTypes: p.ScopeTypes, ScopeKeys: p.ScopeKeys})
		})
	}
	var row db.TaskCreateRow
	queueRow(b, &row, func(r db.DBTX) { _, _ = l.queries.TaskCreate(ctx, r, p) })
	if err := runBatch(ctx, l.conn, b); err != nil {
		return Task{}, wrapDBError(ctx, "create task", err)
	}
	if !row.ReadCommitted {
		return Task{}, errorf("ratelimit: create task: %w", ErrIsolation)
	}
	if !row.Admitted {
		if len(row.QueueAdmitted) != len(queueLimits) {
			return Task{}, fmt.Errorf("ratelimit: create task: %s but %s", plural.Count(len(queueLimits), "queue limit", "queue limits"),
				plural.Count(len(row.QueueAdmitted), "count", "counts"))
		}
		for i, ql := range queueLimits {
			if float64(row.QueueAdmitted[i]) >= ql.Limit {
				return Task{}, queueExceeded(ql, row.QueueAdmitted[i])
			}
		}
		return Task{}, errors.New("ratelimit: create task: refused without a full queue")
	}
	t := Task{
		ID:             idString(row.TaskID),
		Status:         row.Status.String,
		Async:          spec.Async,
		Kind:           spec.Kind,
		Payload:        rawJSON(row.Payload),
		ExecutionToken: idString(row.ExecutionToken),
		AttemptID:      idString(row.AttemptID),
		LastEventSeq:   1,
		NextRunAt:      deref(row.NextRunAt),
		CreatedAt:      deref(row.CreatedAt),
		UpdatedAt:      deref(row.CreatedAt),
		LeaseExpiresAt: deref(row.LeaseExpiresAt),
	}
	if !spec.Async {
		t.Worker = spec.Worker
		t.AttemptCount = 1
	}
	return t, nil
}

// cancelAbandonedTask cancels a task that CreateTask created after its
// caller had stopped waiting (its context ended): nobody knows its id. A
// sync task is cancelled while it still runs under the token it was
// created with, an async one while no worker has claimed it: states that
// cancelling ends for good, so it is idempotent and tried again as a
// release is (retryUnheld). Fenced so, it runs in the background
// (runToAnswer) without racing a later call on the task: one that claims,
// finishes or requeues it first leaves it to that call.
func (l *Limiter) cancelAbandonedTask(t Task, handedOver time.Time) {
	id, err := parseID("taskID", t.ID)
	if err != nil {
		return
	}
	token, err := parseOptionalID("token", t.ExecutionToken) // none for an async task
	if err != nil {
		return
	}
	p := db.TaskCancelAbandonedParams{TaskID: id, Token: token, Now: l.opts.clock.at()}
	l.retryUnheld(handedOver, func(ctx context.Context) error {
		_, err := l.queries.TaskCancelAbandoned(ctx, l.conn, p)
		return err
	})
}

func taskCreateParams(spec TaskSpec) (db.TaskCreateParams, []Limit, error) {
	p := db.TaskCreateParams{AsyncMode: spec.Async, Kind: spec.Kind}
	if err := validateOptionalText("Kind", spec.Kind, maxTaskTextBytes); err != nil {
		return p, nil, err
	}
	payload, err := jsonOrEmptyObject("Payload", spec.Payload)
	if err != nil {
		return p, nil, err
	}
	p.Payload = string(payload)
	if spec.Async {
		if spec.Worker != "" {
			return p, nil, &ValidationError{Field: "Worker", Value: shown(spec.Worker), Reason: "must be empty for an async task (the worker that claims it names itself)"}
		}
		if spec.LeaseTTL != 0 {
			return p, nil, &ValidationError{Field: "LeaseTTL", Value: spec.LeaseTTL, Reason: "must be zero for an async task (ClaimTask sets the lease)"}
		}
	} else {
		if err := validateText("Worker", spec.Worker); err != nil {
			return p, nil, err
		}
		seconds, err := leaseSeconds("LeaseTTL", spec.LeaseTTL)
		if err != nil {
			return p, nil, err
		}
		p.Worker, p.LeaseSeconds = spec.Worker, seconds
	}
	limits, err := validateQueueLimits(spec.QueueLimits)
	if err != nil {
		return p, nil, err
	}
	p.ScopeTypes, p.ScopeKeys, p.LimitValues = []string{}, []string{}, []float64{}
	for _, ql := range limits {
		p.ScopeTypes = append(p.ScopeTypes, ql.Scope.Type)
		p.ScopeKeys = append(p.ScopeKeys, ql.Scope.Key)
		p.LimitValues = append(p.LimitValues, ql.Limit)
	}
	return p, limits, nil
}

// validateQueueLimits checks queue_size limits; nothing is written when it
// fails.
func validateQueueLimits(limits []Limit) ([]Limit, error) {
	if len(limits) > MaxLimitsPerCall {
		return nil, &ValidationError{Field: "QueueLimits", Value: len(limits), Reason: fmt.Sprintf("at most %d limits per call", MaxLimitsPerCall)}
	}
	seen := make(map[[2]string]int, len(limits))
	for i, ql := range limits {
		if err := inElement("QueueLimits", i, checkQueueLimit(ql)); err != nil {
			return nil, err
		}
		key := [2]string{ql.Scope.Type, ql.Scope.Key}
		if j, dup := seen[key]; dup {
			return nil, &ValidationError{Field: fmt.Sprintf("QueueLimits[%d]", i), Value: shown(ql.Scope.text()),
				Reason: fmt.Sprintf("same queue scope as QueueLimits[%d]", j)}
		}
		seen[key] = i
	}
	return limits, nil
}

// checkQueueLimit validates one queue_size limit; a field its error names
// is relative to the limit ("Limit").
func checkQueueLimit(ql Limit) error {
	if err := validateText("Scope.Type", ql.Scope.Type); err != nil {
		return err
	}
	if err := validateText("Scope.Key", ql.Scope.Key); err != nil {
		return err
	}
	if ql.Metric != "" && ql.Metric != MetricQueueSize {
		return &ValidationError{Field: "Metric", Value: shown(ql.Metric), Reason: "must be queue_size (window and concurrent limits go to Reserve)"}
	}
	if ql.Local {
		// As Limit.Validate refuses it on a concurrent limit: a caller who
		// set it expects a block in memory, and the queue is counted in the
		// database all the same.
		return &ValidationError{Field: "Local", Value: true,
			Reason: "only window limits can be admitted from local allotments; queue places are always counted in the database"}
	}
	if err := validateAmount("Limit", ql.Limit); err != nil {
		return err
	}
	if ql.Limit != math.Trunc(ql.Limit) {
		return &ValidationError{Field: "Limit", Value: ql.Limit, Reason: "must be a whole number of tasks"}
	}
	if ql.Limit > math.MaxInt32 {
		return &ValidationError{Field: "Limit", Value: ql.Limit, Reason: fmt.Sprintf("must be at most %d tasks", math.MaxInt32)}
	}
	if ql.Amount != 0 && ql.Amount != 1 {
		return &ValidationError{Field: "Amount", Value: ql.Amount, Reason: "must be 0 or 1: a task takes one queue place"}
	}
	if ql.Window != 0 {
		return &ValidationError{Field: "Window", Value: ql.Window, Reason: "must be zero: a queue has no window"}
	}
	if ql.LeaseTTL != 0 {
		return &ValidationError{Field: "LeaseTTL", Value: ql.LeaseTTL, Reason: "must be zero: a queue place lasts until the task finishes"}
	}
	return nil
}

// queueExceeded explains a queue_size refusal.
func queueExceeded(ql Limit, admitted int64) *ExceededError {
	current := float64(admitted)
	e := &ExceededError{
		ScopeType: ql.Scope.Type, ScopeKey: ql.Scope.Key, ScopeName: ql.Scope.Name, ScopeMetadata: ql.Scope.Metadata,
		Metric: MetricQueueSize, Limit: ql.Limit, Amount: 1,
		Current: current, Used: current, Projected: current + 1, Policy: ql.Policy,
	}
	if ql.Limit < 1 {
		e.Message = fmt.Sprintf("rate limit exceeded: queue_size limit %s of %s admits no task", amounttext.Full(ql.Limit), ql.Scope.text())
		return e
	}
	e.Retryable = true
	e.Message = fmt.Sprintf("rate limit exceeded: queue %s holds %d of %s %s; retry when one finishes", ql.Scope.text(), admitted,
		amounttext.Full(ql.Limit), plural.Noun(int64(ql.Limit), "task", "tasks")) // a whole number of tasks (checkQueueLimit)
	return e
}
