package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// Task statuses. Queued and running are live; the other three are final.
const (
	TaskQueued    = "queued"
	TaskRunning   = "running"
	TaskSucceeded = "succeeded"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// Error codes recovery records on the tasks it fails.
const (
	// ErrorCodeServerRestarted: a sync task's execution lease expired; its
	// caller (the process that ran it) is gone.
	ErrorCodeServerRestarted = "server_restarted"
	// ErrorCodeRequeueLimitExceeded: an async task's execution lease expired
	// once more after it had been requeued the maximum number of times
	// (WithMaxRequeues): a poison task, failed for good.
	ErrorCodeRequeueLimitExceeded = "requeue_limit_exceeded"
	// ErrorCodeExecutionLeaseExpired is recorded on the attempt that was
	// running when its task's execution lease expired.
	ErrorCodeExecutionLeaseExpired = "execution_lease_expired"
)

// DefaultTaskLeaseTTL is the execution lease of a claimed or started task
// when the caller gives none. Heartbeat well within it.
const DefaultTaskLeaseTTL = 120 * time.Second

// Bounds of free-form task texts: labels (kind, error code, event status,
// phase, platform) and messages.
const (
	maxTaskTextBytes = 512
	maxMessageBytes  = 64 << 10
)

var (
	// ErrNoTask is returned by ClaimTask when no queued async task is due.
	ErrNoTask = errors.New("ratelimit: no runnable task")
	// ErrStaleToken is matched (errors.Is) by every *StaleTokenError: the
	// execution token presented no longer owns the task.
	ErrStaleToken = errors.New("ratelimit: stale execution token")
)

// StaleTokenError refuses a heartbeat or finish whose execution token does
// not own the task any more: the task is not running (recovery requeued or
// failed it, or it was finished), or another claim replaced this one.
// Nothing was written.
type StaleTokenError struct {
	TaskID string
	// Status is the task's status when the call was refused.
	Status string
	Reason string
}

// Error says which task refused the token and why.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("ratelimit: stale execution token for task %s (status %s): %s", e.TaskID, e.Status, e.Reason)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// TaskSpec describes a task to create.
type TaskSpec struct {
	// Async tasks are created queued and run by a worker that claims them
	// (ClaimTask); recovery requeues them when their worker dies. A sync
	// task is created running, by and for the caller that runs it at once
	// (it never sits queued without an owner); recovery fails it when its
	// caller dies.
	Async bool
	// Kind labels the work for operators ("chat", "image"...). Optional.
	Kind string
	// Payload is caller data, any JSON value; empty means {}.
	Payload json.RawMessage
	// QueueLimits are queue_size limits: the task is admitted only while
	// each scope holds fewer unfinished tasks than its Limit (a whole number;
	// 0 admits nothing). Metric must be queue_size (or empty); Amount must be
	// 0 or 1 (a task takes one place either way); Window and LeaseTTL must
	// be zero.
	QueueLimits []Limit
	// Worker names the process running a sync task (required for sync
	// tasks, must be empty for async ones: the claiming worker names itself).
	Worker string
	// LeaseTTL is the execution lease of a sync task, in whole seconds;
	// zero means DefaultTaskLeaseTTL. Must be zero for async tasks.
	LeaseTTL time.Duration
}

// Task is a task as stored. The execution fields are set while it runs.
type Task struct {
	ID      string
	Status  string
	Async   bool
	Kind    string
	Payload json.RawMessage
	// Error, ErrorCode and ErrorMessage explain a failed or cancelled task.
	Error        json.RawMessage
	ErrorCode    string
	ErrorMessage string
	// Worker is who claimed or started the task (kept after it finishes).
	Worker string
	// ExecutionToken fences the current claim: HeartbeatTask and FinishTask
	// must present it. Empty unless running.
	ExecutionToken string
	// LeaseExpiresAt is when the current claim lapses unless heartbeated;
	// zero unless running.
	LeaseExpiresAt time.Time
	// AttemptID is the running attempt; empty unless running.
	AttemptID    string
	AttemptCount int
	RequeueCount int
	LastEventSeq int
	NextRunAt    time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// FinishedAt is zero until the task reaches a final status.
	FinishedAt time.Time
}

// Finished reports whether the task reached a final status.
func (t Task) Finished() bool {
	return t.Status == TaskSucceeded || t.Status == TaskFailed || t.Status == TaskCancelled
}

// Outcome is how a task ended.
type Outcome struct {
	// Status is TaskSucceeded, TaskFailed or TaskCancelled.
	Status string
	// ErrorCode and ErrorMessage explain a failure or cancellation; they
	// must be empty for a success.
	ErrorCode    string
	ErrorMessage string
	// Error is optional structured error detail (JSON).
	Error json.RawMessage
	// Retryable is recorded on the attempt: whether another attempt might
	// succeed.
	Retryable bool
}

// FinishResult reports what FinishTask did.
type FinishResult struct {
	Task Task
	// ReleasedReservations counts the task's reservations that were still
	// open and that FinishTask released (reason task_finished). Commit a
	// grant with its actual amounts before finishing; a non-zero count
	// means some usage was never committed.
	ReleasedReservations int
	// ReleasedLeases counts the task's concurrency leases it released.
	ReleasedLeases int
	// DeletedAdmissions counts the queue places it freed.
	DeletedAdmissions int
}

// Attempt is one execution attempt (one claim) of a task.
type Attempt struct {
	ID           string
	TaskID       string
	Number       int
	Status       string
	Retryable    bool
	ErrorCode    string
	ErrorMessage string
	StartedAt    time.Time
	FinishedAt   time.Time
}

// Event is one entry of a task's event log.
type Event struct {
	// Seq is allocated by AppendEvent: 1, 2, 3... per task, without gaps.
	Seq        int
	Type       string
	Status     string
	Phase      string
	Progress   float64
	Message    string
	Payload    json.RawMessage
	Simulated  bool
	PlatformID string
	CreatedAt  time.Time
}

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
// statement. One round trip. Inside a caller's transaction (WithTx), call
// it after any Reserve of the same transaction (lock order: counter rows
// before advisory locks).
func (l *Limiter) CreateTask(ctx context.Context, spec TaskSpec) (Task, error) {
	p, queueLimits, err := taskCreateParams(spec)
	if err != nil {
		return Task{}, err
	}
	b := &pgx.Batch{}
	if len(queueLimits) > 0 {
		queue(b, func(r db.DBTX) {
			_ = l.queries.TaskAdmissionLockScopes(ctx, r, db.TaskAdmissionLockScopesParams{ScopeTypes: p.ScopeTypes, ScopeKeys: p.ScopeKeys})
		})
	}
	var row db.TaskCreateRow
	queueRow(b, &row, func(r db.DBTX) { _, _ = l.queries.TaskCreate(ctx, r, p) })
	if err := runBatch(ctx, l.conn, b); err != nil {
		return Task{}, wrapDBError("create task", err)
	}
	if !row.Admitted {
		if len(row.QueueAdmitted) != len(queueLimits) {
			return Task{}, fmt.Errorf("ratelimit: create task: %d queue limits but %d counts", len(queueLimits), len(row.QueueAdmitted))
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
		Payload:        json.RawMessage(row.Payload),
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

func taskCreateParams(spec TaskSpec) (db.TaskCreateParams, []Limit, error) {
	p := db.TaskCreateParams{AsyncMode: spec.Async, Kind: spec.Kind}
	if err := validateOptionalText("Kind", spec.Kind, maxTaskTextBytes); err != nil {
		return p, nil, err
	}
	payload, err := jsonOrEmptyObject("Payload", spec.Payload)
	if err != nil {
		return p, nil, err
	}
	p.Payload = payload
	if spec.Async {
		if spec.Worker != "" {
			return p, nil, &ValidationError{Field: "Worker", Value: spec.Worker, Reason: "must be empty for an async task (the worker that claims it names itself)"}
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
		field := func(name string) string { return fmt.Sprintf("QueueLimits[%d].%s", i, name) }
		if err := validateText(field("Scope.Type"), ql.Scope.Type); err != nil {
			return nil, err
		}
		if err := validateText(field("Scope.Key"), ql.Scope.Key); err != nil {
			return nil, err
		}
		if ql.Metric != "" && ql.Metric != MetricQueueSize {
			return nil, &ValidationError{Field: field("Metric"), Value: ql.Metric, Reason: "must be queue_size (window and concurrent limits go to Reserve)"}
		}
		if err := validateAmount(field("Limit"), ql.Limit); err != nil {
			return nil, err
		}
		if ql.Limit != math.Trunc(ql.Limit) || ql.Limit > math.MaxInt32 {
			return nil, &ValidationError{Field: field("Limit"), Value: ql.Limit, Reason: "must be a whole number of tasks"}
		}
		if ql.Amount != 0 && ql.Amount != 1 {
			return nil, &ValidationError{Field: field("Amount"), Value: ql.Amount, Reason: "must be 0 or 1: a task takes one queue place"}
		}
		if ql.Window != 0 {
			return nil, &ValidationError{Field: field("Window"), Value: ql.Window, Reason: "must be zero: a queue has no window"}
		}
		if ql.LeaseTTL != 0 {
			return nil, &ValidationError{Field: field("LeaseTTL"), Value: ql.LeaseTTL, Reason: "must be zero: a queue place lasts until the task finishes"}
		}
		key := [2]string{ql.Scope.Type, ql.Scope.Key}
		if j, dup := seen[key]; dup {
			return nil, &ValidationError{Field: fmt.Sprintf("QueueLimits[%d]", i), Value: ql.Scope.Type + ":" + ql.Scope.Key,
				Reason: fmt.Sprintf("same queue scope as QueueLimits[%d]", j)}
		}
		seen[key] = i
	}
	return limits, nil
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
		e.Message = fmt.Sprintf("rate limit exceeded: queue_size limit %g of %s:%s admits no task", ql.Limit, ql.Scope.Type, ql.Scope.Key)
		return e
	}
	e.Retryable = true
	e.Message = fmt.Sprintf("rate limit exceeded: queue %s:%s holds %d of %g tasks; retry when one finishes", ql.Scope.Type, ql.Scope.Key, admitted, ql.Limit)
	return e
}

// ClaimTask claims the next due queued async task for workerID: the task
// becomes running with a new execution token and a lease of leaseTTL (zero
// means DefaultTaskLeaseTTL), a new attempt row and a task.running event.
// Workers never wait on each other (FOR UPDATE SKIP LOCKED). Returns
// ErrNoTask when nothing is due. One round trip.
func (l *Limiter) ClaimTask(ctx context.Context, workerID string, leaseTTL time.Duration) (Task, error) {
	if err := validateText("workerID", workerID); err != nil {
		return Task{}, err
	}
	seconds, err := leaseSeconds("leaseTTL", leaseTTL)
	if err != nil {
		return Task{}, err
	}
	row, err := l.queries.TaskClaimNext(ctx, l.conn, db.TaskClaimNextParams{Worker: workerID, LeaseSeconds: seconds})
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, ErrNoTask
	}
	if err != nil {
		return Task{}, wrapDBError("claim task", err)
	}
	return taskFromRow(db.TaskGetRow(row)), nil
}

// HeartbeatTask extends a running task's execution lease to now() + ttl
// (zero means DefaultTaskLeaseTTL) and returns the new expiry, on the
// database's clock. It is fenced by the execution token: when the token no
// longer owns the task the error is a *StaleTokenError (errors.Is
// ErrStaleToken) and the worker must stop. A claim stays valid until someone
// takes the task away, so a heartbeat after the lease expired still succeeds
// if recovery has not reclaimed the task yet. One round trip.
func (l *Limiter) HeartbeatTask(ctx context.Context, taskID, token string, ttl time.Duration) (time.Time, error) {
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
	row, err := l.queries.TaskHeartbeat(ctx, l.conn, db.TaskHeartbeatParams{TaskID: id, Token: tok, LeaseSeconds: seconds})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("ratelimit: heartbeat task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return time.Time{}, wrapDBError("heartbeat task", err)
	}
	if row.RenewedUntil == nil {
		return time.Time{}, staleToken(taskID, row.Status, row.TokenMatches)
	}
	return *row.RenewedUntil, nil
}

// staleToken explains why a token was refused.
func staleToken(taskID, status string, tokenMatches bool) *StaleTokenError {
	e := &StaleTokenError{TaskID: taskID, Status: status}
	switch {
	case status != TaskRunning:
		e.Reason = "the task is not running (finished, or reclaimed by recovery after its lease expired)"
	case !tokenMatches:
		e.Reason = "the token does not match the task's current claim (it was requeued and claimed again)"
	default:
		e.Reason = "the claim changed while the call ran (finished or reclaimed concurrently)"
	}
	return e
}

// FinishTask ends a running task, fenced by its execution token: the task
// takes out.Status (succeeded, failed or cancelled) with its error, its
// running attempt finishes with the same status, its concurrency leases are
// released, its queue admissions deleted (the places count again), a final
// event appended (task.completed, task.failed or task.cancelled), and any
// reservation of the task still open is released (reason task_finished;
// FinishResult says how many: commit grants before finishing).
//
// A stale token gives a *StaleTokenError and changes nothing about the task.
// (If the token goes stale between the two round trips, the reservations
// that were open under the old claim are still released: the old claim is
// over, and recovery would release them anyway.)
//
// Two round trips: a read of the task's open reservations, then one batch
// that locks their counters first (lock order), finishes the task and
// settles the reservations, as one transaction.
func (l *Limiter) FinishTask(ctx context.Context, taskID, token string, out Outcome) (FinishResult, error) {
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

	plan, err := l.queries.TaskFinishPlan(ctx, l.conn, db.TaskFinishPlanParams{TaskID: id, Token: tok})
	if errors.Is(err, pgx.ErrNoRows) {
		return FinishResult{}, fmt.Errorf("ratelimit: finish task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return FinishResult{}, wrapDBError("finish task", err)
	}
	if plan.Status != TaskRunning || !plan.TokenMatches {
		return FinishResult{}, staleToken(taskID, plan.Status, plan.TokenMatches)
	}

	rids := plan.OpenReservationIds
	b := &pgx.Batch{}
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, rids) })
	}
	var finished []db.TaskFinishRow
	queueRows(b, &finished, func(r db.DBTX) { _, _ = l.queries.TaskFinish(ctx, r, p) })
	var settled []db.ReservationSettleRow
	if len(rids) > 0 {
		queueRows(b, &settled, func(r db.DBTX) {
			_, _ = l.queries.ReservationSettle(ctx, r, db.ReservationSettleParams{
				ReservationIds: rids, ActualAmounts: make([]float64, len(rids)), Status: StatusReleased,
				Reason: pgtype.Text{String: "task_finished", Valid: true},
			})
		})
	}
	if err := runBatch(ctx, l.conn, b); err != nil {
		return FinishResult{}, wrapDBError("finish task", err)
	}
	if len(finished) == 0 {
		return FinishResult{}, staleToken(taskID, TaskRunning, true)
	}
	f := finished[0]
	res := FinishResult{
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
	for _, s := range settled {
		if s.Settled {
			res.ReleasedReservations++
		}
	}
	return res, nil
}

func finishParams(id, tok pgtype.UUID, out Outcome) (db.TaskFinishParams, error) {
	p := db.TaskFinishParams{TaskID: id, Token: tok, Status: out.Status, Retryable: out.Retryable}
	switch out.Status {
	case TaskSucceeded:
		if out.ErrorCode != "" || out.ErrorMessage != "" || len(out.Error) > 0 {
			return p, &ValidationError{Field: "Outcome", Value: out.ErrorCode, Reason: "a succeeded task carries no error"}
		}
	case TaskFailed, TaskCancelled:
	default:
		return p, &ValidationError{Field: "Outcome.Status", Value: out.Status, Reason: "must be succeeded, failed or cancelled"}
	}
	if err := validateOptionalText("Outcome.ErrorCode", out.ErrorCode, maxTaskTextBytes); err != nil {
		return p, err
	}
	if err := validateOptionalText("Outcome.ErrorMessage", out.ErrorMessage, maxMessageBytes); err != nil {
		return p, err
	}
	if len(out.Error) > 0 {
		if !json.Valid(out.Error) {
			return p, &ValidationError{Field: "Outcome.Error", Value: string(out.Error), Reason: "must be valid JSON"}
		}
		p.Error = out.Error
	}
	p.ErrorCode = pgtype.Text{String: out.ErrorCode, Valid: out.ErrorCode != ""}
	p.ErrorMessage = pgtype.Text{String: out.ErrorMessage, Valid: out.ErrorMessage != ""}
	return p, nil
}

// GetTask reads one task; ErrUnknownTask when no task has that id.
func (l *Limiter) GetTask(ctx context.Context, taskID string) (Task, error) {
	id, err := parseID("taskID", taskID)
	if err != nil {
		return Task{}, err
	}
	row, err := l.queries.TaskGet(ctx, l.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("ratelimit: get task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return Task{}, wrapDBError("get task", err)
	}
	return taskFromRow(row), nil
}

// TaskAttempts lists the attempts of a task, in order.
func (l *Limiter) TaskAttempts(ctx context.Context, taskID string) ([]Attempt, error) {
	id, err := parseID("taskID", taskID)
	if err != nil {
		return nil, err
	}
	rows, err := l.queries.AttemptListByTask(ctx, l.conn, id)
	if err != nil {
		return nil, wrapDBError("list attempts", err)
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{
			ID: idString(r.ID), TaskID: idString(r.TaskID), Number: int(r.AttemptNo), Status: r.Status,
			Retryable: r.Retryable, ErrorCode: r.ErrorCode.String, ErrorMessage: r.ErrorMessage.String,
			StartedAt: r.StartedAt, FinishedAt: deref(r.FinishedAt),
		}
	}
	return out, nil
}

// AppendEvent appends e to the task's event log and returns it with its
// sequence number and time. Sequence numbers are allocated under the task
// row's lock: unique and without gaps whatever the concurrency. e.Type is
// required; Seq and CreatedAt are ignored. ErrUnknownTask when no task has
// that id. One round trip.
func (l *Limiter) AppendEvent(ctx context.Context, taskID string, e Event) (Event, error) {
	id, err := parseID("taskID", taskID)
	if err != nil {
		return Event{}, err
	}
	if err := validateText("Event.Type", e.Type); err != nil {
		return Event{}, err
	}
	for _, f := range []struct{ field, value string }{
		{"Event.Status", e.Status}, {"Event.Phase", e.Phase}, {"Event.PlatformID", e.PlatformID},
	} {
		if err := validateOptionalText(f.field, f.value, maxTaskTextBytes); err != nil {
			return Event{}, err
		}
	}
	if err := validateOptionalText("Event.Message", e.Message, maxMessageBytes); err != nil {
		return Event{}, err
	}
	if math.IsNaN(e.Progress) || math.IsInf(e.Progress, 0) {
		return Event{}, &ValidationError{Field: "Event.Progress", Value: e.Progress, Reason: "must be a finite number"}
	}
	payload, err := jsonOrEmptyObject("Event.Payload", e.Payload)
	if err != nil {
		return Event{}, err
	}
	row, err := l.queries.EventAppend(ctx, l.conn, db.EventAppendParams{
		TaskID: id, EventType: e.Type, Status: optText(e.Status), Phase: optText(e.Phase), Progress: e.Progress,
		Message: optText(e.Message), Payload: payload, Simulated: e.Simulated, PlatformID: optText(e.PlatformID),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, fmt.Errorf("ratelimit: append event to task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return Event{}, wrapDBError("append event", err)
	}
	e.Seq, e.CreatedAt, e.Payload = int(row.Seq), row.CreatedAt, json.RawMessage(payload)
	return e, nil
}

// eventPage is how many events TaskEvents reads per round trip.
const eventPage = 1000

// TaskEvents returns the task's events in sequence order.
func (l *Limiter) TaskEvents(ctx context.Context, taskID string) ([]Event, error) {
	id, err := parseID("taskID", taskID)
	if err != nil {
		return nil, err
	}
	var out []Event
	after := int32(0)
	for {
		rows, err := l.queries.EventListByTask(ctx, l.conn, db.EventListByTaskParams{TaskID: id, AfterSeq: after, MaxRows: eventPage})
		if err != nil {
			return nil, wrapDBError("list events", err)
		}
		for _, r := range rows {
			out = append(out, Event{
				Seq: int(r.Seq), Type: r.EventType, Status: r.Status.String, Phase: r.Phase.String, Progress: r.Progress,
				Message: r.Message.String, Payload: json.RawMessage(r.Payload), Simulated: r.Simulated,
				PlatformID: r.PlatformID.String, CreatedAt: r.CreatedAt,
			})
			after = r.Seq
		}
		if len(rows) < eventPage {
			return out, nil
		}
	}
}

func taskFromRow(r db.TaskGetRow) Task {
	t := Task{
		ID: idString(r.ID), Status: r.Status, Async: r.AsyncMode, Kind: r.Kind, Payload: json.RawMessage(r.Payload),
		ErrorCode: r.ErrorCode.String, ErrorMessage: r.ErrorMessage.String, Worker: r.LockedBy.String,
		ExecutionToken: idString(r.ExecutionToken), LeaseExpiresAt: deref(r.ExecutionLeaseExpiresAt),
		AttemptID: idString(r.AttemptID), AttemptCount: int(r.AttemptCount), RequeueCount: int(r.RequeueCount),
		LastEventSeq: int(r.LastEventSeq), NextRunAt: r.NextRunAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		FinishedAt: deref(r.FinishedAt),
	}
	if len(r.Error) > 0 {
		t.Error = json.RawMessage(r.Error)
	}
	return t
}

// leaseSeconds validates an execution lease TTL (zero: the default).
func leaseSeconds(field string, ttl time.Duration) (int32, error) {
	if ttl == 0 {
		ttl = DefaultTaskLeaseTTL
	}
	if err := validateSeconds(field, ttl, MaxLeaseTTL); err != nil {
		return 0, err
	}
	return int32(ttl / time.Second), nil
}

// validateOptionalText accepts "" or a valid UTF-8 string without NUL
// bytes (PostgreSQL text cannot hold NUL) of at most maxBytes bytes.
func validateOptionalText(field, s string, maxBytes int) error {
	switch {
	case s == "":
		return nil
	case len(s) > maxBytes:
		return &ValidationError{Field: field, Value: fmt.Sprintf("%d bytes", len(s)), Reason: fmt.Sprintf("must be at most %d bytes", maxBytes)}
	case !utf8.ValidString(s):
		return &ValidationError{Field: field, Value: fmt.Sprintf("%.60q", s), Reason: "must be valid UTF-8"}
	case strings.IndexByte(s, 0) >= 0:
		return &ValidationError{Field: field, Value: fmt.Sprintf("%.60q", s), Reason: "must not contain NUL bytes"}
	}
	return nil
}

// jsonOrEmptyObject returns b, or {} when b is empty, refusing invalid JSON.
func jsonOrEmptyObject(field string, b json.RawMessage) ([]byte, error) {
	if len(b) == 0 {
		return []byte("{}"), nil
	}
	if !json.Valid(b) {
		return nil, &ValidationError{Field: field, Value: fmt.Sprintf("%.60q", b), Reason: "must be valid JSON"}
	}
	return b, nil
}

func optText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
