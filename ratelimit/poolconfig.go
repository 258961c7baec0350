package ratelimit

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool sets up cfg, before the pool is made from it, so that a
// statement cancelled mid-flight never leaves a grant nobody knows of.
//
// A statement of the Limiter whose callers all left is cancelled once it
// has run on for a grace (see Reserve). pgx's default then closes the
// connection and sends the server a cancel request on a connection of its
// own; a statement that the server commits before that request lands (the
// row lock it waited for released in that moment) holds what it granted,
// and nobody reads its answer: the reservation stays open until its window
// ends, the lease until its TTL. With ConfigurePool, pgx sends the cancel
// request first and reads the statement's answer: the statement is rolled
// back (SQLSTATE 57014), or it committed and its answer names the grants,
// which the Limiter then releases.
//
// The price is paid only when a statement is cancelled: pgx waits for the
// server's answer to the cancel (a round trip), and then 100 ms more before
// the connection is used again (so that the request cannot cancel the next
// statement), and the call returns after that; from a server that does not
// answer, it gives up after cancelAnswerTimeout (250 ms) and closes the
// connection, as pgx's default does at once.
// It changes nothing else: exec mode, pool size and the rest of cfg are
// left as they are.
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelAnswerTimeout}
	}
}

// cancelAnswerTimeout is how long a connection ConfigurePool set up waits,
// once its statement is cancelled, for the server to answer it.
const cancelAnswerTimeout = 250 * time.Millisecond
