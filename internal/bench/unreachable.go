package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnreachable is returned (wrapped, naming the workload) by Run when every operation of a
// workload failed to reach the database: the server is down or gone, and the workloads left
// would only fail the same way, each for its full duration.
var ErrUnreachable = errors.New("every operation failed to reach the database")

// unreachable reports an error of an operation that did not reach a live server: connecting
// failed on the way (refused, no route, no such host, timed out, the connection closed before
// the server answered), the connection broke, or the server ended the session as it shut down
// (SQLSTATE class 57P, at startup too: "the database system is shutting down") or failed it
// (class 08). An answer of a live server is not, nor a refusal at connect (too many
// connections, a failed authentication, no such database: a *pgconn.PgError in the
// *pgconn.ConnectError), nor a connect that failed in the client (say, SASL), nor a
// cancellation: they are counted as errors, and a run that meets one on every operation goes on
// (its first error says what it is) rather than stop as if the database were gone.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	var netErr net.Error // a dial's or a connection's, and context.DeadlineExceeded
	switch {
	case errors.As(err, &pgErr):
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	case errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	return false
}

// allUnreachable reports whether res decided nothing and every one of its operations failed
// to reach the database.
func allUnreachable(res Result) bool {
	return res.Ops == 0 && res.Errors > 0 && res.unreachable == res.Errors
}
