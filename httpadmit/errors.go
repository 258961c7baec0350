package httpadmit

import (
	"errors"
	"fmt"

	"github.com/pgadmit/pgadmit/internal/plural"
)

var (
	// ErrBadRequest marks an error that is the request's fault: the default
	// error handler answers 400. Wrap it in errors a LimitsFunc returns for
	// requests it cannot map to limits (no API key, a body that is not
	// JSON); the default error handler answers 413 instead for one that
	// also holds an *http.MaxBytesError (a body read through
	// http.MaxBytesReader that was over its bound). MaxBytesReader needs no
	// writer there (nil): when the 413 goes out, net/http reads what is left
	// of the body, up to 256 KiB, and keeps the connection, or else closes
	// it (Connection: close), so the rest is never read as a request. A
	// limit that ratelimit refuses as invalid in what the request sets (a
	// negative estimate in Amount, an empty Scope.Key), or two on one
	// counter, are reported with it too.
	ErrBadRequest = errors.New("httpadmit: bad request")
	// ErrUnavailable is matched by the *UnavailableError a request gets when
	// the database failed or did not answer in time and one of its enforced
	// limits fails closed: the default error handler answers 503.
	ErrUnavailable = errors.New("httpadmit: admission control unavailable")
	// ErrInvalidLimit is matched by the error a request gets when a limit its
	// LimitsFunc returned is one the middleware cannot apply, whatever the
	// request: a Mode or a FailurePolicy that is none of the defined values,
	// or a field other than Amount and Scope.Key that ratelimit refuses (a
	// negative quota, an empty metric, a window that is no whole number of
	// seconds); or when it returned more enforced limits with an amount than one
	// Reserve takes (ratelimit.MaxLimitsPerCall). The error is also a
	// *ratelimit.ValidationError naming the field as in "Limits[1].Mode", by
	// the limit's index in what the LimitsFunc returned ("Limits" for their
	// number). Nothing is reserved, the error is logged (at most one line a
	// second), and the default error handler answers 500: the configuration
	// is wrong, not the request.
	ErrInvalidLimit = errors.New("httpadmit: invalid limit")
	// ErrRequestEnded is matched by the error a request gets when its
	// context had ended before its Reserve was sent: its client left
	// (context.Canceled is in the chain too; over HTTP/1 net/http sees it
	// once the body was read, by the LimitsFunc say) or its deadline passed
	// (context.DeadlineExceeded, from the context or as its cause). Nothing
	// is reserved and the handler does not run; the Observer is told of no
	// decision. The default error handler answers 503 for a deadline and
	// StatusClientClosedRequest (499) for a client gone, to whom nothing
	// goes. A context that ends once the Reserve was sent is not looked at:
	// the request is admitted and settled as the package documentation says.
	// A request with nothing to reserve (no limits, or none with an amount)
	// goes to the handler whatever its context, as it would without the
	// middleware: the error spares the round trips of reserving and
	// releasing a request nobody waits for, which it does not cost.
	ErrRequestEnded = errors.New("httpadmit: the request ended before its admission was decided")
	// ErrNoAdmission is returned by ReportUsage and Discard for a context
	// that did not come through the middleware (a nil one too).
	ErrNoAdmission = errors.New("httpadmit: no admission in this context")
	// ErrHandlerReturned is returned by ReportUsage and Discard called once
	// the request's handler has returned (or panicked), from a goroutine it
	// started say: the request was settled with what had been reported by
	// then, and the call changes nothing.
	ErrHandlerReturned = errors.New("httpadmit: the request's handler has returned: usage is no longer taken")
)

// UnavailableError is a request refused because the database failed (Err:
// its error, or context.DeadlineExceeded when it did not answer within the
// decision timeout) and a limit fails closed. Find it with errors.As, or
// match it with errors.Is(err, ErrUnavailable); Err stays in the chain
// (errors.Is(err, context.DeadlineExceeded) for a timeout).
type UnavailableError struct {
	Err error
	// Limits are the enforced limits whose FailClosed policy refused the
	// request.
	Limits []Limit
}

// Error says how many limits failed closed, and the database's error (its
// Example's output):
//
//	httpadmit: admission control unavailable (1 limit fails closed): context deadline exceeded
func (e *UnavailableError) Error() string {
	// One made by hand may have no Limits, or no Err: the message leaves them out.
	msg := "httpadmit: admission control unavailable"
	if n := len(e.Limits); n > 0 {
		msg += " (" + plural.Count(n, "limit fails", "limits fail") + " closed)"
	}
	if e.Err == nil {
		return msg
	}
	return fmt.Sprintf("%s: %v", msg, e.Err)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap gives the database's error.
func (e *UnavailableError) Unwrap() error { return e.Err }
