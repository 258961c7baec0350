package promadmit

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// resultClasses is the result label of every exported sentinel error and
// error type of ratelimit, by its name there. TestEveryRatelimitErrorHasAClass
// fails when ratelimit exports an error this table does not name, so that
// a new one gets a class chosen for it, not "error" by default.
var resultClasses = map[string]struct {
	err  error
	want string
}{
	"ErrExceeded":             {ratelimit.ErrExceeded, ResultExceeded},
	"ExceededError":           {&ratelimit.ExceededError{}, ResultExceeded},
	"ErrLeaseLost":            {ratelimit.ErrLeaseLost, ResultLeaseLost},
	"LeaseLostError":          {&ratelimit.LeaseLostError{}, ResultLeaseLost},
	"ErrMaintenanceLeaseLost": {ratelimit.ErrMaintenanceLeaseLost, ResultLeaseLost},
	"ErrUnknownGrant":         {ratelimit.ErrUnknownGrant, ResultUnknownGrant},
	"ErrInvalidInput":         {ratelimit.ErrInvalidInput, ResultRejected},
	"ValidationError":         {&ratelimit.ValidationError{}, ResultRejected},
	"ErrUnknownTask":          {ratelimit.ErrUnknownTask, ResultRejected},
	"ErrTaskFinished":         {ratelimit.ErrTaskFinished, ResultRejected},
	"ErrNoTask":               {ratelimit.ErrNoTask, ResultRejected},
	"ErrStaleToken":           {ratelimit.ErrStaleToken, ResultRejected},
	"StaleTokenError":         {&ratelimit.StaleTokenError{}, ResultRejected},
	"ErrTaskNotQueued":        {ratelimit.ErrTaskNotQueued, ResultRejected},
	"TaskNotQueuedError":      {&ratelimit.TaskNotQueuedError{}, ResultRejected},
	"ErrLockOrder":            {ratelimit.ErrLockOrder, ResultRejected},
	"LockOrderError":          {&ratelimit.LockOrderError{}, ResultRejected},
	// A Recover or Prune batch that another session's lock held past
	// WithMaintenanceLockTimeout: the database answered, and the run did
	// the rest.
	"LockWaitError": {&ratelimit.LockWaitError{Job: "recover", Step: "reclaim expired tasks", Rows: 1,
		Err: &pgconn.PgError{Code: "55P03"}}, ResultLockWait},
	// A failed step of a Recover or Prune run has no class of its own:
	// its error's, here a lock wait's.
	"StepError": {&ratelimit.StepError{Job: "prune", Step: "counters", Err: &ratelimit.LockWaitError{Job: "prune", Step: "counters",
		Err: &pgconn.PgError{Code: "55P03"}}}, ResultLockWait},
	// Deployment faults that fail every call until the connections are
	// fixed: admission control is down, as when the database is.
	"ErrIsolation":        {ratelimit.ErrIsolation, ResultError},
	"ErrPoolerMismatch":   {ratelimit.ErrPoolerMismatch, ResultError},
	"ErrStatementPooling": {ratelimit.ErrStatementPooling, ResultError},
	"ErrPoolerUnknown":    {ratelimit.ErrPoolerUnknown, ResultError},
	"PoolerError":         {&ratelimit.PoolerError{Cause: errors.New("42P05")}, ResultError},
}

func TestResultOfEveryRatelimitError(t *testing.T) {
	t.Parallel()
	for name, c := range resultClasses {
		for _, err := range []error{c.err, fmt.Errorf("ratelimit: op: %w", c.err)} {
			if got := result(err); got != c.want {
				t.Errorf("%s (%v): result %q, want %q", name, err, got, c.want)
			}
		}
	}
}

// Every exported Err* variable and *Error type of ratelimit is in
// resultClasses.
func TestEveryRatelimitErrorHasAClass(t *testing.T) {
	t.Parallel()
	_, files, err := gosrc.ParseDir("../ratelimit", 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for gen, spec := range gosrc.Specs(files) {
		var names []string
		switch s := spec.(type) {
		case *ast.ValueSpec:
			for _, n := range s.Names {
				if gen.Tok == token.VAR && n.IsExported() && strings.HasPrefix(n.Name, "Err") {
					names = append(names, n.Name)
				}
			}
		case *ast.TypeSpec:
			if s.Name.IsExported() && strings.HasSuffix(s.Name.Name, "Error") {
				names = append(names, s.Name.Name)
			}
		}
		for _, n := range names {
			found++
			if _, ok := resultClasses[n]; !ok {
				t.Errorf("ratelimit.%s has no result class: add it to resultClasses (and to the README)", n)
			}
		}
	}
	if found != len(resultClasses) {
		t.Errorf("ratelimit exports %d errors, resultClasses names %d", found, len(resultClasses))
	}
}

// timeoutErr is a net.Error that timed out, as a dial or read past its
// deadline gives, with no context.DeadlineExceeded in its chain.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

// A database that does not answer in time is timeout however the timeout
// is wrapped; one that refuses or fails at once is error.
func TestResultOfTimeoutsAndFailures(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ResultOK},
		{"context deadline", fmt.Errorf("ratelimit: reserve: %w", context.DeadlineExceeded), ResultTimeout},
		{"dial timeout", fmt.Errorf("failed to connect to host=db: %w", dial), ResultTimeout},
		{"read timeout", fmt.Errorf("ratelimit: commit: %w", timeoutErr{}), ResultTimeout},
		{"pgconn timeout", pgconnTimeout(t), ResultTimeout},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, ResultError},
		{"server error", &pgconn.PgError{Code: "57P01"}, ResultError},
		{"plain", errors.New("boom"), ResultError},
		// A run's errors joined: lock_wait only when every one is a lock
		// wait; a step the server rejected, or a run cut off, says more.
		{"lock waits", errors.Join(fmt.Errorf("ratelimit: recover: a: %w", lockWait()), fmt.Errorf("ratelimit: recover: b: %w", lockWait())), ResultLockWait},
		{"lock wait and a rejected row", errors.Join(fmt.Errorf("left 1 row the server rejected: %w", &pgconn.PgError{Code: "23514"}), lockWait()), ResultError},
		{"lock wait and a lost connection", errors.Join(fmt.Errorf("ratelimit: recover: a: %w", lockWait()), &pgconn.PgError{Code: "57P01"}), ResultError},
		{"lock wait, then cut off", errors.Join(lockWait(), fmt.Errorf("ratelimit: prune: b: %w", context.DeadlineExceeded)), ResultTimeout},
		// A caller who left (or a shutdown) cancelled it: not the database's health.
		{"caller left", fmt.Errorf("ratelimit: reserve: %w", context.Canceled), ResultCanceled},
		{"lock wait, then cancelled", errors.Join(lockWait(), fmt.Errorf("ratelimit: prune: b: %w", context.Canceled)), ResultCanceled},
	} {
		if got := result(c.err); got != c.want {
			t.Errorf("%s (%v): result %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

// lockWait is a step's *ratelimit.LockWaitError, as Recover and Prune return it.
func lockWait() error {
	return &ratelimit.LockWaitError{Job: "prune", Step: "counters", Err: &pgconn.PgError{Code: "55P03"}}
}

// pgconnTimeout is the error pgconn gives a connect whose context expired:
// what pgconn.Timeout reports as a timeout.
func pgconnTimeout(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_, err := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1")
	if err == nil || !pgconn.Timeout(err) {
		t.Fatalf("connect with an expired context: %v, not a pgconn timeout", err)
	}
	return err
}

// When one error holds several classes (Recover and Prune join the errors
// of their steps, and a step cut off keeps what it left beside what cut
// it off), the class that ended the call wins: a deadline, then the
// caller's cancel. Below them, a class identified in the chain outranks
// error, which is a part in which none is, except rejected: beside a row
// the server rejected, a failure of the database (a lost connection, a
// statement timeout) is what an alert must see. lock_wait, which needs
// every error to be a lock wait, comes last. Every pair, either way round.
func TestResultPrecedence(t *testing.T) {
	t.Parallel()
	// One error of each class, as ratelimit makes it, highest first.
	ranked := []struct {
		class string
		err   error
	}{
		{ResultTimeout, fmt.Errorf("ratelimit: prune: counters: %w", context.DeadlineExceeded)},
		{ResultCanceled, fmt.Errorf("ratelimit: recover: reclaim expired tasks: %w", context.Canceled)},
		{ResultExceeded, &ratelimit.ExceededError{}},
		{ResultLeaseLost, fmt.Errorf("%w (job recover, holder h)", ratelimit.ErrMaintenanceLeaseLost)},
		{ResultUnknownGrant, fmt.Errorf("ratelimit: attach: %w", ratelimit.ErrUnknownGrant)},
		{ResultError, fmt.Errorf("ratelimit: recover: b: %w", &pgconn.PgError{Code: "57P01"})},
		{ResultRejected, foreignKeyRejected()},
		{ResultLockWait, lockWait()},
	}
	for i, hi := range ranked {
		for _, lo := range ranked[i+1:] {
			for _, err := range []error{errors.Join(hi.err, lo.err), errors.Join(lo.err, hi.err)} {
				if got := result(err); got != hi.class {
					t.Errorf("%s with %s (%q): result %q, want %q", hi.class, lo.class, err, got, hi.class)
				}
			}
		}
	}
	// The case that was labelled rejected: a step left a row the server
	// rejected for a missing task, then the run met its deadline (or its
	// caller left).
	for _, c := range []struct {
		cut  error
		want string
	}{
		{context.DeadlineExceeded, ResultTimeout},
		{timeoutErr{}, ResultTimeout},
		{context.Canceled, ResultCanceled},
	} {
		err := errors.Join(foreignKeyRejected(), fmt.Errorf("ratelimit: recover: b: %w", c.cut))
		if got := result(err); got != c.want {
			t.Errorf("a rejected row, then cut off by %v: result %q, want %q", c.cut, got, c.want)
		}
	}
	// A run that left a row rejected for a missing task and then lost its
	// connection, in a later step (its steps' errors joined) or in the same
	// one (cut short: what cut it off beside what it left), failed: the
	// rest of the run never ran. It was labelled rejected, out of sight of
	// an alert on error.
	lost := fmt.Errorf("ratelimit: recover: b: %w", &pgconn.PgError{Code: "57P01", Severity: "FATAL"})
	for name, err := range map[string]error{
		"a lost connection in a later step":    errors.Join(foreignKeyRejected(), lost),
		"a lost connection in the same step":   errors.Join(cutShort(fmt.Errorf("ratelimit: recover: a: %w", io.ErrUnexpectedEOF), foreignKeyRejected())),
		"a lost connection beside a lock wait": errors.Join(foreignKeyRejected(), lockWait(), lost),
		// Not a lost connection but a server error the run went on past
		// (runSteps): the later step's statement timed out.
		"a later step's statement timeout": errors.Join(foreignKeyRejected(),
			fmt.Errorf("ratelimit: prune: b: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})),
	} {
		if got := result(err); got != ResultError {
			t.Errorf("a rejected row and %s (%q): result %q, want %q", name, err, got, ResultError)
		}
	}
	// A rejection alone stays rejected, though ratelimit wraps the server's
	// error (which has no class) beside the class.
	for _, err := range []error{
		foreignKeyRejected(),
		errors.Join(foreignKeyRejected(), fmt.Errorf("left 2 rows the server rejected: %w", foreignKeyRejected())),
		fmt.Errorf("ratelimit: finish task: %w: %w", ratelimit.ErrTaskFinished, &pgconn.PgError{Code: "P0001"}),
	} {
		if got := result(err); got != ResultRejected {
			t.Errorf("%q: result %q, want %q", err, got, ResultRejected)
		}
	}
	// A caller that left while the database did not answer in time (a
	// lease's release, bounded on its own, timed out): the database's
	// trouble is what an alert must see.
	if got := result(errors.Join(context.Canceled, fmt.Errorf("release the prune lease: %w", context.DeadlineExceeded))); got != ResultTimeout {
		t.Errorf("canceled with a timeout: result %q, want %q", got, ResultTimeout)
	}
}

// foreignKeyRejected is a row a Recover or Prune step left because the
// server rejected it for a task or attempt that names no row (23503), as
// the step reports it: ErrUnknownTask.
func foreignKeyRejected() error {
	fk := &pgconn.PgError{Code: "23503", ConstraintName: "gateway_rate_limit_reservations_task_id_fkey"}
	return fmt.Errorf("left 1 row the server rejected: ratelimit: recover: release reservations: %w (%s): %w",
		ratelimit.ErrUnknownTask, fk.ConstraintName, fk)
}

// cutShort is the error of a step that failed with err after it had left
// rows (left), as ratelimit makes it: both wrapped, neither in the other.
func cutShort(err, left error) error { return &cutShortError{err, left} }

type cutShortError struct{ err, left error }

func (e *cutShortError) Error() string   { return e.err.Error() + "\n" + e.left.Error() }
func (e *cutShortError) Unwrap() []error { return []error{e.err, e.left} }
