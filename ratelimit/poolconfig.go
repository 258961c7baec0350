package ratelimit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool sets up cfg, before the pool is made from it, so that a
// statement cancelled mid-flight never leaves a grant nobody knows of.
//
// A statement of the Limiter whose callers all left is cancelled once it
// has run on for a grace (see Reserve). pgx's default then gives the
// connection up unread, sends the server a cancel request on a connection
// of its own and closes it; a statement that the server commits before that request lands (the
// row lock it waited for released in that moment) holds what it granted,
// and nobody reads its answer: the reservation stays open until its window
// ends, the lease until its TTL. With ConfigurePool, pgx sends the cancel
// request first and reads the statement's answer: the statement is rolled
// back (SQLSTATE 57014), or it committed and its answer names the grants,
// which the Limiter then releases.
//
// The price is paid only when a statement is cancelled: the connection
// waits for the server's answer to the cancel (a round trip), and then
// 100 ms more before it is used again (so that the request cannot cancel
// the next statement), and the call returns after that; from a server
// that does not answer, it gives up after cancelAnswerTimeout (250 ms) and
// closes the connection, as pgx's default does at once: up to 350 ms in
// all.
// It changes nothing else: exec mode, pool size and the rest of cfg are
// left as they are.
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &cancelRequestHandler{conn: c}
	}
}

// cancelAnswerTimeout is how long a connection ConfigurePool set up waits,
// once its statement is cancelled, for the server to answer it.
const cancelAnswerTimeout = 250 * time.Millisecond

// cancelRequestPause is how long a connection whose statement was
// cancelled waits after the cancel request before it is used again: the
// server may deliver the request to the backend a moment after it answered
// it, and must not cancel the next statement (pgx's
// CancelRequestContextWatcherHandler pauses as long, for the same reason).
const cancelRequestPause = 100 * time.Millisecond

// cancelRequestHandler is pgx's CancelRequestContextWatcherHandler, except
// that a cancel request, once sent, is left to finish (the server closes
// its connection) within cancelAnswerTimeout even when the statement is
// answered first. pgx's closes the request's connection at that moment,
// and PgBouncer (1.18 at least; its issue #801) exits with "FATAL ...
// bad client state: 0" when a cancel request's client leaves before
// PgBouncer has forwarded it: every client of the pooler loses its
// connection (TestReserveCancelledBehindPgBouncerLeavesThePoolerRunning).
type cancelRequestHandler struct {
	conn *pgconn.PgConn
	done chan struct{} // closed once the cancel request and the pause are over
}

func (h *cancelRequestHandler) HandleCancel(context.Context) {
	deadline := time.Now().Add(cancelAnswerTimeout)
	_ = h.conn.Conn().SetDeadline(deadline)
	done := make(chan struct{})
	h.done = done
	go func() {
		defer close(done)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		_ = h.conn.CancelRequest(ctx)
		time.Sleep(cancelRequestPause)
	}()
}

func (h *cancelRequestHandler) HandleUnwatchAfterCancel() {
	<-h.done
	_ = h.conn.Conn().SetDeadline(time.Time{})
}
