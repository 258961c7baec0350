package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
)

// Task statuses. Queued and running are live; the other three are final.
const (
	TaskQueued    = "queued"
	TaskRunning   = "running"
	TaskSucceeded = "succeeded"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// Error codes pgadmit records on the tasks it ends: recovery on those it
// fails (and their attempts), CancelTask on those it cancels.
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
	// ErrorCodeCancelledWhileQueued: CancelTask cancelled the task before
	// any worker claimed it (again); the reason given is its ErrorMessage.
	ErrorCodeCancelledWhileQueued = "cancelled_while_queued"
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
	// ErrTaskNotQueued is matched (errors.Is) by every *TaskNotQueuedError.
	ErrTaskNotQueued = errors.New("ratelimit: task not queued")
)

// TaskNotQueuedError refuses a CancelTask of a task that is not queued: a
// worker claimed it (Status running; a sync task is never queued), or it
// finished (an earlier CancelTask cancelled it, say). The task was not
// changed. Find it with errors.As, or match it with
// errors.Is(err, ErrTaskNotQueued).
type TaskNotQueuedError struct {
	// TaskID is the task, as the call named it.
	TaskID string
	// Status is the task's status when the call was refused.
	Status string
}

// Error says which task was not queued, and how it is (its Example's
// output):
//
//	ratelimit: cancel task 0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90: not queued (status running)
func (e *TaskNotQueuedError) Error() string {
	return "ratelimit: cancel task" + taskText(e.TaskID) + ": not queued" + statusText(e.Status)
}

// Is makes errors.Is(err, ErrTaskNotQueued) true.
func (e *TaskNotQueuedError) Is(target error) bool { return target == ErrTaskNotQueued }

// StaleTokenError refuses a heartbeat, event or finish whose execution token
// does not own the task any more: the task is not running (recovery
// requeued or failed it, or it was finished), or another claim replaced
// this one. The task itself was not changed. HeartbeatTask and AppendEvent
// wrote nothing; FinishTask wrote nothing when it found the token stale at
// once, but when the token went stale between its two round trips, the
// task finishing meanwhile, it still released the task's reservations that
// were open when it read them (see FinishTask). Find it with errors.As, or
// match it with errors.Is(err, ErrStaleToken).
type StaleTokenError struct {
	// TaskID is the task, as the call named it.
	TaskID string
	// Status is the task's status when the call was refused.
	Status string
	// Reason says why the token is stale: the task is not running, or
	// another claim replaced this one.
	Reason string
}

// Error says which task refused the token and why (its Example's output):
//
//	ratelimit: stale execution token for task 0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90 (status queued): the task is not running (finished, or reclaimed by recovery after its lease expired)
func (e *StaleTokenError) Error() string {
	msg := "ratelimit: stale execution token"
	if e.TaskID != "" {
		msg += " for task " + e.TaskID
	}
	msg += statusText(e.Status)
	if e.Reason == "" {
		return msg
	}
	return msg + ": " + e.Reason
}

// taskText is " " and the task's id, and statusText " (status S)", for the
// messages of the task errors: each is empty for an empty field, which the
// calls that refuse a task fill but one made by hand may not.
func taskText(id string) string {
	if id == "" {
		return ""
	}
	return " " + id
}

func statusText(status string) string {
	if status == "" {
		return ""
	}
	return " (status " + status + ")"
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
	// Payload is caller data, any JSON value of at most MaxPayloadBytes;
	// empty means {}.
	Payload json.RawMessage
	// QueueLimits are queue_size limits: the task is admitted only while
	// each scope holds fewer unfinished tasks than its Limit (a whole number;
	// 0 admits nothing). Metric must be queue_size (or empty); Window and
	// LeaseTTL must be zero. Amount must be 0 or 1 and is otherwise ignored:
	// unlike a limit of Reserve, which an Amount of 0 skips, a queue limit
	// with Amount 0 still counts the task (one place) and still refuses it
	// when the scope is full.
	QueueLimits []Limit
	// Worker names the process running a sync task (required for sync
	// tasks, must be empty for async ones: the claiming worker names itself).
	Worker string
	// LeaseTTL is the execution lease of a sync task, in whole seconds up
	// to MaxLeaseTTL; zero means DefaultTaskLeaseTTL. Must be zero for
	// async tasks.
	LeaseTTL time.Duration
}

// Task is a task as stored. The execution fields are set while it runs.
type Task struct {
	// ID is the task's UUID, which its attempts, events, reservations,
	// leases and queue admissions refer to.
	ID string
	// Status is TaskQueued, TaskRunning, or one of the final three
	// (TaskSucceeded, TaskFailed, TaskCancelled).
	Status string
	// Async, Kind and Payload are the TaskSpec's, Payload as jsonb
	// stores it.
	Async   bool
	Kind    string
	Payload json.RawMessage
	// Error, ErrorCode and ErrorMessage explain a failed or cancelled task.
	Error        json.RawMessage
	ErrorCode    string
	ErrorMessage string
	// Worker is who claimed or started the task (kept after it finishes).
	Worker string
	// ExecutionToken fences the current claim: HeartbeatTask, AppendEvent
	// and FinishTask must present it. Empty unless running.
	ExecutionToken string
	// LeaseExpiresAt is when the current claim lapses unless heartbeated;
	// zero unless running.
	LeaseExpiresAt time.Time
	// AttemptID is the running attempt; empty unless running.
	AttemptID string
	// AttemptCount counts the attempts started (claims): the last one's
	// Number.
	AttemptCount int
	// RequeueCount counts the times recovery requeued the task after its
	// execution lease expired; past WithMaxRequeues it fails the task.
	RequeueCount int
	// LastEventSeq is the Seq of the task's last event; AppendEvent takes
	// the next.
	LastEventSeq int
	// NextRunAt is when a queued async task becomes due: ClaimTask claims
	// none before it, and the oldest first. It is the creation time, or
	// when recovery last requeued the task.
	NextRunAt time.Time
	// CreatedAt is when the task was created and UpdatedAt when its row
	// last changed, on the database's clock.
	CreatedAt time.Time
	UpdatedAt time.Time
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

// FinishResult reports what FinishTask, or CancelTask, did.
type FinishResult struct {
	// Task is the task as the call left it.
	Task Task
	// ReleasedReservations counts the task's open reservations that
	// FinishTask (or CancelTask) released (reason task_finished). Commit a
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
	// ID is the attempt's UUID, which reservations and leases attached to
	// it name (Task.AttemptID while it runs).
	ID string
	// TaskID is the task it runs.
	TaskID string
	// Number is its 1-based number within the task.
	Number int
	// Status is TaskRunning until the attempt ends, then TaskSucceeded,
	// TaskFailed or TaskCancelled.
	Status string
	// Retryable is whether another attempt might succeed, as recorded when
	// the attempt ended (FinishTask records Outcome.Retryable); false while
	// it runs.
	Retryable bool
	// ErrorCode and ErrorMessage say why a failed or cancelled attempt
	// ended (execution_lease_expired, task_finished, abandoned, or the
	// Outcome's).
	ErrorCode    string
	ErrorMessage string
	// StartedAt is when it began (its claim, or a sync task's creation),
	// and FinishedAt when it ended; zero while it runs.
	StartedAt  time.Time
	FinishedAt time.Time
}

// Event is one entry of a task's event log.
type Event struct {
	// Seq is allocated by AppendEvent: 1, 2, 3... per task, without gaps.
	Seq int
	// Type is what happened (required): pgadmit writes task.queued,
	// task.running, task.completed, task.failed and task.cancelled; any
	// other is the caller's.
	Type string
	// Status is the task status the event reports, Phase a caller-defined
	// phase within it ("streaming"), Progress a caller-defined measure and
	// Message a note for people; all optional.
	Status   string
	Phase    string
	Progress float64
	Message  string
	// Payload is caller data, any JSON value of at most MaxPayloadBytes;
	// empty means {}. AppendEvent and TaskEvents return it as jsonb
	// stores it.
	Payload json.RawMessage
	// Simulated marks an event of a dry run, and PlatformID names the
	// upstream platform the event concerns; both optional, stored as given.
	Simulated  bool
	PlatformID string
	// CreatedAt is when the event was appended, on the database's clock.
	CreatedAt time.Time
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

// jsonOrEmptyObject returns b, or {} when b is empty, refusing what
// validateJSON refuses.
func jsonOrEmptyObject(field string, b json.RawMessage) ([]byte, error) {
	if len(b) == 0 {
		return []byte("{}"), nil
	}
	if err := validateJSON(field, b); err != nil {
		return nil, err
	}
	return b, nil
}

// validateJSON accepts valid JSON of at most MaxPayloadBytes that a jsonb
// column can store. Go's
// json.Valid is not enough: jsonb refuses the \u0000 escape (it cannot hold
// NUL in text), a \u escape of half a surrogate pair, bytes that are not
// UTF-8, and numbers outside numeric's range, each with a raw SQLSTATE;
// these are refused here instead, before anything is sent (inside a
// caller's transaction, a refused statement would abort it).
func validateJSON(field string, b []byte) error {
	refuse := func(reason string) error {
		return &ValidationError{Field: field, Value: fmt.Sprintf("%.60q", b), Reason: reason}
	}
	if len(b) > MaxPayloadBytes {
		return refuse(fmt.Sprintf("must be at most %d bytes, not %d", MaxPayloadBytes, len(b)))
	}
	if !json.Valid(b) {
		return refuse("must be valid JSON")
	}
	if !utf8.Valid(b) {
		return refuse("must be valid UTF-8")
	}
	if reason := jsonbEscapeProblem(b); reason != "" {
		return refuse(reason)
	}
	if reason := jsonbNumberProblem(b); reason != "" {
		return refuse(reason)
	}
	return nil
}

// jsonbNumberProblem scans valid JSON for a number that jsonb refuses
// ("value overflows numeric format": it stores numbers as numeric) and
// says which, or returns "". It skips strings, which in valid JSON end at
// the first '"' not escaped (an escape is a backslash and the byte after
// it), so that every other '-' or digit starts a number literal.
//
// It also refuses a document longer than MaxPayloadBytes once every digit
// of its numbers is counted as jsonb writes them out when it gives the
// document back (the spaces it adds after separators are not counted):
// "1e131071" comes back as 131072 digits, "1e-16383" as 16385 characters,
// so 90 kB of such numbers came back as over a gigabyte, and every
// statement returning the document (creating the task, reading it, its
// events) failed with a raw "out of memory" (SQLSTATE 54000).
func jsonbNumberProblem(b []byte) string {
	grown := 0 // how much longer jsonb writes the numbers seen than they are
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '-' || '0' <= c && c <= '9':
			start := i
			for i+1 < len(b) && isNumberByte(b[i+1]) {
				i++
			}
			n := b[start : i+1]
			if !numericFits(n) {
				return fmt.Sprintf("must not contain the number %.40s: it is outside what jsonb (numeric) can store", n)
			}
			grown += max(numericTextLen(n)-len(n), 0)
			if len(b)+grown > MaxPayloadBytes {
				return fmt.Sprintf("must be at most %d bytes counting every digit of its numbers as jsonb writes them out (the number %.40s has %d)",
					MaxPayloadBytes, n, numericTextLen(n))
			}
		}
	}
	return ""
}

// jsonbEscapeProblem scans valid JSON for string escapes that jsonb
// refuses and says what is wrong, or returns "". In valid JSON a backslash
// occurs only inside strings and always starts an escape, so reading the
// escapes left to right (\\ is one escape) tells an escaped backslash
// followed by the text u0000 (fine) from the escape \u0000 (refused): the
// latter has an odd number of backslashes before its u.
func jsonbEscapeProblem(b []byte) string {
	const (
		nul  = "must not contain the escape \\u0000: jsonb cannot store a NUL character"
		lone = "must not contain an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF): jsonb cannot store it"
	)
	high := false // the previous character was a \u escape of a high surrogate
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			if high {
				return lone
			}
			continue
		}
		// Valid JSON guarantees a character after the backslash, and four
		// hex digits after a u.
		if b[i+1] != 'u' {
			if high {
				return lone
			}
			i++
			continue
		}
		r, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		i += 5
		low := r >= 0xDC00 && r <= 0xDFFF
		switch {
		case high != low: // a high surrogate without its low half, or the reverse
			return lone
		case low: // the low half of a pair
			high = false
		case r == 0:
			return nul
		default:
			high = r >= 0xD800 && r <= 0xDBFF
		}
	}
	if high {
		return lone
	}
	return ""
}

// rawJSON returns the JSON text of a nullable jsonb column, nil for NULL.
func rawJSON(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

func optText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
