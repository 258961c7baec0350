package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/decimal"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/internal/plural"
)

var (
	// ErrInvalidInput is matched (errors.Is) by every *ValidationError.
	ErrInvalidInput = errors.New("ratelimit: invalid input")
	// ErrExceeded is matched (errors.Is) by every *ExceededError.
	ErrExceeded = errors.New("ratelimit: limit exceeded")
	// ErrLeaseLost is matched by the error RenewLeases returns when a lease
	// had already expired or been released; errors.As gives *LeaseLostError.
	ErrLeaseLost = errors.New("ratelimit: concurrency lease lost")
	// ErrUnknownTask is returned when a task or attempt id names no row.
	ErrUnknownTask = errors.New("ratelimit: unknown task or attempt")
	// ErrUnknownGrant is returned by Attach when a reservation or lease of
	// the grant no longer exists (pruned, or never written).
	ErrUnknownGrant = errors.New("ratelimit: unknown reservation or lease")
	// ErrTaskFinished refuses an admission for a task that is finished, or
	// for an attempt that is no longer running (its task was reclaimed by
	// recovery, or finished): the worker has lost its claim.
	ErrTaskFinished = errors.New("ratelimit: task finished or attempt no longer running")
	// ErrIsolation is returned when a statement that must run in READ
	// COMMITTED finds another isolation level (a caller's REPEATABLE READ or
	// SERIALIZABLE transaction, or default_transaction_isolation): admission
	// is exact only when each statement sees what the previous holder of a
	// lock committed. Nothing was written.
	ErrIsolation = errors.New("ratelimit: pgadmit needs READ COMMITTED (set default_transaction_isolation = 'read committed' for its connections, or use a READ COMMITTED transaction)")
)

// ValidationError reports an input that was refused before anything was
// written. Field names the offending field, as in "Limits[2].Amount".
// Find it with errors.As (it may come wrapped: a nil connection's names
// the operation first), or match it with errors.Is(err, ErrInvalidInput).
type ValidationError struct {
	// Field is the refused input's name; empty when it is about no field in
	// particular (the message then says "value").
	Field string
	// Value is the refused value, as given.
	Value any
	// Reason says why it was refused.
	Reason string
}

// Error names the field, the value and the reason (its Example's output):
//
//	ratelimit: invalid Amount (-500): must not be negative
func (e *ValidationError) Error() string {
	field := e.Field
	if field == "" { // about no field in particular (ValidateAmount's, for its caller to name)
		field = "value"
	}
	value := e.Value
	if f, ok := value.(float64); ok { // an amount: in full, as the reasons' bounds are
		value = amounttext.Full(f)
	}
	if e.Reason == "" { // one made by hand: no empty reason, nor a value it did not give
		if value == nil {
			return "ratelimit: invalid " + field
		}
		return fmt.Sprintf("ratelimit: invalid %s (%v)", field, value)
	}
	return fmt.Sprintf("ratelimit: invalid %s (%v): %s", field, value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidInput) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidInput }

// ExceededError explains a refusal: which limit, how full it was, and when
// retrying can help. Time-derived fields come from the database's clock.
// Find it with errors.As, or match it with errors.Is(err, ErrExceeded).
type ExceededError struct {
	// ScopeType, ScopeKey, Metric, Limit, Amount and Policy are the refused
	// Limit's (Scope.Type, Scope.Key, ...), and ScopeName and ScopeMetadata
	// its Scope's Name and Metadata: the caller's own map, not a copy, and
	// nil when the Scope had none. Amount is 1 for a queue_size limit,
	// whatever the Limit's: a task takes one place.
	ScopeType     string
	ScopeKey      string
	ScopeName     string
	ScopeMetadata map[string]any
	Metric        string
	Limit         float64
	Amount        float64
	// Current is what the limit already counted: Used + Reserved for a
	// window limit, the live leases' total for a concurrent one, the
	// scope's unfinished tasks for a queue_size one (CreateTask).
	Current float64
	// Used and Reserved are a window's committed amounts and its open
	// reservations (Local blocks' units included). For a concurrent or
	// queue_size limit, Used is Current and Reserved 0.
	Used     float64
	Reserved float64
	// Projected is Current + Amount.
	Projected float64
	// WindowSeconds is the window limit's window; 0 for a concurrent or
	// queue_size limit, which has none (the reference gateway store
	// reported its default, 60).
	WindowSeconds int
	// ResetAt is the end of the window, or the earliest expiry of a live
	// lease; zero for a queue_size limit, whose places free when tasks
	// finish. RetryAfter is ResetAt minus the database's now(), at least 1s
	// (and at most 5s for concurrent limits, whose slots usually free early),
	// or 0 when the refusal is not Retryable, and for a queue_size limit,
	// Retryable or not (nothing predicts when a task finishes).
	ResetAt    time.Time
	RetryAfter time.Duration
	// Policy is the refused Limit's Policy.
	Policy string
	// Message is the error's text (Error): the metric, the scope and why
	// the amount did not fit.
	Message string
	// Retryable is false when the amount can never fit (it exceeds the limit).
	Retryable bool
}

// Error is Message, which names the metric and the scope and says why the
// amount did not fit (ErrExceeded's text for one made by hand without
// it); a window limit's (its Example's output):
//
//	rate limit exceeded: tokens window of api_key:9f86d081884c7d65 has 800 of 100000 left, 1500 needed; retry after 23s
func (e *ExceededError) Error() string {
	if e.Message == "" { // one made by hand, not by the Limiter
		return ErrExceeded.Error()
	}
	return e.Message
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Remaining is what the limit had left for the request: Limit - Current,
// never below 0, subtracted in decimal as the database's numeric does
// (each as its shortest decimal form, as pgx sends and reads them), so a
// limit of 0.3 with 0.2 used has 0.1 left, where float64's 0.3 - 0.2 is
// 0.09999999999999998. It is the nearest float64; RemainingText writes
// the difference exactly.
func (e *ExceededError) Remaining() float64 {
	if left, ok := e.exactRemaining(); ok {
		return left.Approx()
	}
	return max(e.Limit-e.Current, 0)
}

// RemainingText is Remaining exactly, in full and without an exponent, as
// the message shows it: "0.1", and "999999999999999.999999999" for a limit
// of 1e15 with 1e-9 used (a float64 rounds it to 1e15).
func (e *ExceededError) RemainingText() string {
	if left, ok := e.exactRemaining(); ok {
		return left.Text()
	}
	return amounttext.Full(e.Remaining())
}

// exactRemaining is Limit - Current, at least 0, in decimal. It is not ok
// for a Limit or Current that no limit or counter holds (NaN, an infinity,
// a negative number, one beyond 1e21 or below MinAmount: an error built
// by hand), whose difference is then float64's; such a value in decimal
// could run to hundreds of digits.
func (e *ExceededError) exactRemaining() (units, bool) {
	held := func(v float64) bool { return v == 0 || v >= MinAmount && v <= 1e21 } // false for NaN
	if !held(e.Limit) || !held(e.Current) {
		return units{}, false
	}
	left := decimal.Of(e.Limit).Minus(decimal.Of(e.Current))
	if left.Sign() <= 0 {
		return units{}, true // not -0, which a Limit of -0 would leave
	}
	return left, true
}

// LeaseLostError names the leases RenewLeases could not renew. Find it
// with errors.As, or match it with errors.Is(err, ErrLeaseLost).
type LeaseLostError struct {
	// LeaseIDs are the leases not renewed (expired, released or gone), as
	// given and in the order given.
	LeaseIDs []string
	// Renewed counts the others, which were renewed (and returned).
	Renewed int
}

// Error counts the leases lost and names them, and counts those renewed
// (its Example's output):
//
//	ratelimit: concurrency lease lost: 1 lease expired or released (0b6f1c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d); renewed 2
func (e *LeaseLostError) Error() string {
	if len(e.LeaseIDs) == 0 { // one made by hand: RenewLeases names at least one
		if e.Renewed == 0 {
			return ErrLeaseLost.Error()
		}
		return fmt.Sprintf("%v; renewed %d", ErrLeaseLost, e.Renewed)
	}
	return fmt.Sprintf("ratelimit: concurrency lease lost: %s expired or released (%s); renewed %d",
		plural.Count(len(e.LeaseIDs), "lease", "leases"), strings.Join(e.LeaseIDs, ", "), e.Renewed)
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// LockWaitError is what a Recover or Prune step left because another
// transaction held a lock it needed for longer than
// WithMaintenanceLockTimeout (Bound): the server gave up waiting (SQLSTATE 55P03,
// lock_not_available, in Err) and the batch rolled back whole (a batch
// that releases reservations, or reclaims tasks holding them, is tried once
// more without the rows whose counter is still held: those alone are left
// then). The rest of
// the run still ran (not so when it is the take of the run's lease: that
// run did nothing); a later run takes what was left once the lock is
// gone. Recover and Prune return it joined with their other errors:
// find it with errors.As.
type LockWaitError struct {
	// Job is "recover" or "prune".
	Job string
	// Step names the step, as in the run's errors and Progress.Step
	// ("reclaim expired tasks", "release stale reservations", ...), or
	// the take or the release of the run's lease ("take the recover
	// lease", "release the prune lease": the lease stays held until its
	// TTL, or this Maintenance's next run takes it back). LeaseTake and
	// LeaseRelease tell those two apart.
	Step string
	// Rows counts the rows of the batches that timed out, which the step
	// left for a later run; 0 when the step's statement works on many rows
	// at once.
	Rows int
	// Bound is the lock_timeout the step's statements ran with, which the
	// server gave up after: WithMaintenanceLockTimeout's, as it is set
	// (rounded up to a whole millisecond, lock_timeout's unit, and at most
	// lock_timeout's range, about 24.8 days), but 4 s at most for the take
	// and the release of the run's lease, which have a timeout of their own
	// besides (5 s). 0: none of pgadmit's, the server's own gave up.
	Bound time.Duration
	// Rest is set when the step also left the rows it had not reached:
	// it stopped there (its single statement timed out, or a step that
	// finds its rows met too many batches that timed out, or too many rows
	// the server rejected).
	Rest bool
	// Err is the server's error.
	Err error
}

// LeaseTake reports whether e is the take of the run's lease giving up
// (Step "take the recover lease", or "take the prune lease"): the run did
// nothing, and a later run takes the lease once the lock is gone.
func (e *LockWaitError) LeaseTake() bool {
	return e != nil && e.Job != "" && e.Step == takeStep(e.Job)
}

// LeaseRelease reports whether e is the release of the run's lease giving
// up (Step "release the recover lease", or "release the prune lease"): the
// run did its work, and left its lease held until it expires (its TTL,
// WithMaintenanceLeaseTTL, after the run took or last renewed it: at most
// that long after the release gave up), unless this Maintenance's next run
// takes it back first. Another process's run meanwhile is skipped.
func (e *LockWaitError) LeaseRelease() bool {
	return e != nil && e.Job != "" && e.Step == leaseReleaseStep(e.Job)
}

// Error names the job and the step, and says what the step left and why,
// with Bound when pgadmit set one (what wraps it in the run's error does
// not name them again); a batch of 3 rows that timed out after 2s (its
// Example's output):
//
//	ratelimit: recover: release reservations of finished tasks: left 3 rows: another transaction held a lock past the lock timeout (2s): ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)
func (e *LockWaitError) Error() string {
	var left string
	switch {
	case e.LeaseTake():
		left = "the run did nothing"
	case e.LeaseRelease():
		left = "left the lease held until it expires (or this Maintenance's next run takes it back)"
	case e.Rows == 0:
		left = "left the rest of the step"
	case e.Rest:
		left = "left " + plural.Count(e.Rows, "row", "rows") + " and the rest of the step"
	default:
		left = "left " + plural.Count(e.Rows, "row", "rows")
	}
	msg := errPrefix
	for _, name := range []string{e.Job, e.Step} { // as StepError's made by hand: what it names
		if name != "" {
			msg += name + ": "
		}
	}
	msg += left + ": another transaction held a lock past the lock timeout"
	if e.Bound > 0 { // 0: the server's own lock_timeout, which pgadmit does not know
		msg += " (" + durationtext.Operator(e.Bound) + ")"
	}
	if e.Err == nil { // one made by hand
		return msg
	}
	return fmt.Sprintf("%s: %v", msg, e.Err)
}

// Unwrap returns Err, the server's error (lock_not_available), so that
// errors.As finds its *pgconn.PgError.
func (e *LockWaitError) Unwrap() error { return e.Err }

// StepError names a step of a Recover or Prune run that ended with an
// error: Err, which says why, as it did without it (its message is Err's;
// one made by hand without Err names its Job and Step).
// The steps are independent: the others still ran, and the run's result
// counts what each did, so a step named here may have counted nothing
// because it failed, not because it found nothing. Recover and Prune
// return one per such step, joined with their other errors (the take and
// the release of the run's lease are not steps): find the first with
// errors.As, or walk the joined errors for each. errors.Is and errors.As
// see through it to Err (the server's error, a *LockWaitError, ctx's).
type StepError struct {
	// Job is "recover" or "prune".
	Job string
	// Step names the step as Progress.Step and *LockWaitError's Step do
	// ("reclaim expired tasks", "allotments", ...).
	Step string
	// Err is the step's error.
	Err error
	// NotRun names the steps after this one, in order, when the run
	// stopped here (ctx done, the run's lease lost, the connection lost:
	// an error that is not the server's rejection of the step's
	// statement) and so did not run them; nil when the run went on, or
	// this was its last step.
	NotRun []string
}

// Error is the step's error, Err's message, which names the job and the
// step; a step that set aside a row the server rejected (its Example's
// output):
//
//	ratelimit: recover: return lost allotments: left 1 row the server rejected: ERROR: new row for relation "gateway_rate_limit_allotments" violates check constraint "gateway_rate_limit_allotments_amounts_check" (SQLSTATE 23514)
func (e *StepError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	// One made by hand without Err: it says what it names, as a step's
	// error starts ("ratelimit: prune: allotments: ...").
	msg := errPrefix
	for _, name := range []string{e.Job, e.Step} {
		if name != "" {
			msg += name + ": "
		}
	}
	return msg + "step failed"
}

// Unwrap returns Err, the step's error, so that errors.Is and errors.As
// see through the step to it (the server's error, a *LockWaitError, ctx's).
func (e *StepError) Unwrap() error { return e.Err }

// OnlyLockWaits reports whether err is made of *LockWaitError alone, however
// joined and wrapped: a Recover or Prune run whose only trouble was rows it
// left behind other sessions' locks. A run that also failed otherwise (cut
// off, a connection lost, a row the server rejected) is not.
func OnlyLockWaits(err error) bool {
	if _, ok := err.(*LockWaitError); ok {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		for _, e := range errs {
			if !OnlyLockWaits(e) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return OnlyLockWaits(u.Unwrap())
	}
	return false
}

// errorf is fmt.Errorf for a message of this package, which starts
// "ratelimit: ": an error among args whose own message starts so too (a
// sentinel such as ErrUnknownTask, a *ValidationError, an error of this
// package wrapped once already) is written without its prefix, so that
// the message names the package once ("ratelimit: get task X: unknown task
// or attempt", not "...: ratelimit: unknown task or attempt"). It wraps
// what fmt.Errorf's %w wraps, the errors themselves: errors.Unwrap gives
// the sentinel as before, and a sentinel wrapped beside the server's error
// ("%w (%s): %w") is one of the errors wrapped, which promadmit takes as
// the class of the whole (a wrapper around it made that "error").
func errorf(format string, args ...any) error {
	if !strings.HasPrefix(format, errPrefix) {
		return fmt.Errorf(format, args...)
	}
	return oneprefix.Errorf(format, args...)
}

// errPrefix starts the message of every error of this package.
const errPrefix = "ratelimit: "
