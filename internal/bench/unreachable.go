package bench

import (
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
// failed (refused, timed out), the connection broke, or the server ended the session as it
// shut down (SQLSTATE class 57P) or failed it (class 08). An answer of a live server, a
// refusal or a cancellation is not.
func unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr):
		return true
	case errors.As(err, &pgErr):
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
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
