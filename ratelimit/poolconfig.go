package ratelimit

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool sets up cfg for pgadmit; call it before the pool is made
// from it. It changes three things:
//   - a statement cancelled mid-flight leaves no grant nobody knows of: pgx
//     sends the cancel request first and reads the statement's answer;
//   - a connection whose session the server has ended is replaced before a
//     statement is sent on it (cfg.ShouldPing);
//   - its sessions write times in the ISO style (DateStyle ISO).
//
// It changes nothing else: exec mode, pool size and the rest of cfg are
// left as they are. A nil cfg, or one not made by pgxpool.ParseConfig (a
// nil ConnConfig), is left as it is: there is nothing to set up.
//
// Cancelled statements. A statement of the Limiter whose callers all left
// is cancelled once it has run on for a grace (see Reserve). pgx's default
// then gives the connection up unread, sends the server a cancel request on
// a connection of its own and closes it. A statement that the server
// commits before that request lands (the row lock it waited for released in
// that moment) holds what it granted, and nobody reads its answer: the
// reservation stays open until its window ends, the lease until its TTL.
//
// With ConfigurePool, pgx sends the cancel request first and reads the
// statement's answer: the statement is rolled back (SQLSTATE 57014), or it
// committed and its answer names the grants, which the Limiter then
// releases. A combined batch on a hot counter is committed by a procedure
// sent after it. A request that lands while it commits fails
// the procedure (57014) once the batch has answered; the Limiter then tells
// the callers the batch failed and releases what the answer names (reason
// "unconfirmed") in the background (Close waits for it).
//
// The price, about 100 ms in all from a server that answers, is paid only
// when a statement is cancelled. The connection waits for the server (or
// the pooler) to acknowledge the cancel request, a round trip, and for the
// statement's answer. It is not used again until 100 ms after the
// acknowledgement, so that the request cannot cancel the next statement.
// If the acknowledgement has not come within 1 s, or the answer within
// 250 ms after it, the connection is
// closed instead, as pgx's default does at once: a call waits at most
// 1.25 s for a cancelled statement.
//
// Ended sessions. A server that ends an idle session (a restart, the old
// primary stopped in a failover, pg_terminate_backend) sends it an error
// (57P01) and closes it. pgxpool pings a connection it hands out only when
// it has been idle for over a second, so after a restart every connection
// used in the last second failed the first statement sent on it, and a
// combined statement failed all its callers.
//
// ConfigurePool sets cfg.ShouldPing so that a connection whose socket
// already has something to read, or is closed, is pinged too, and replaced
// when the ping fails. A ShouldPing already set is kept (either one asking
// for a ping is enough); with none, pgxpool's idle rule is. The check peeks
// at the socket without blocking or sending anything: one system call per
// connection taken that is not pinged anyway (under 2 us measured on Linux,
// where a round trip to a local server takes tens of us). A healthy idle
// connection has nothing to read, but for a notification to a LISTEN on it
// or a notice, which costs one ping that reads it.
//
// The check works on Linux, macOS, the BSDs and Solaris. Elsewhere, and on
// a connection that a DialFunc or AfterNetConnect of the caller's made a
// net.Conn that is no socket (no syscall.Conn), only the idle rule applies.
// A session lost without a word (a host gone, a network cut), or ended
// between the check and the statement, still fails its statement. A
// Reserve, Commit or Release statement that pgx could not write at all
// (nothing of it reached the server) is sent once more on another
// connection.
//
// Times in the ISO style. DateStyle ISO is sent with the connection's
// start-up parameters, which PgBouncer passes on and keeps per client. In
// the exec modes that read results as text (exec, which a transaction
// pooler needs, and simple_protocol) pgx reads a time in that style only,
// and a role or database whose DateStyle is another (SQL, German, Postgres)
// failed every Reserve with a scan error.
//
// The order in which the server reads a date written as text (DMY, MDY,
// YMD) is then the server's default (postgresql.conf; MDY unless set), not
// the role's or the database's. pgadmit writes none, but a caller that
// writes such dates in its own statements on the pool can set its DateStyle
// in cfg ("ISO, DMY"), which is kept, as is any DateStyle cfg already sets.
func ConfigurePool(cfg *pgxpool.Config) {
	if cfg == nil || cfg.ConnConfig == nil {
		return
	}
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &cancelRequestHandler{conn: c}
	}
	cfg.ShouldPing = pingEnded(cfg.ShouldPing)
	isoDates(cfg.ConnConfig)
}

// isoDates has the sessions of cfg write times in the ISO style, the one
// pgx reads as text, unless cfg sets a DateStyle of its own (a start-up
// parameter's name is not case-sensitive).
func isoDates(cfg *pgx.ConnConfig) {
	for name := range cfg.RuntimeParams {
		if strings.EqualFold(name, "datestyle") {
			return
		}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["datestyle"] = "ISO"
}

// cancelAckTimeout is how long a connection whose statement was cancelled
// waits for the server to acknowledge the cancel request before it gives up
// on the statement and is closed. Through a busy PgBouncer, which opens a
// server connection to forward each request, that took 312 ms in a CI run.
const cancelAckTimeout = time.Second

// cancelAnswerTimeout is how long a connection waits for its cancelled
// statement's answer once the server acknowledged the cancel request.
const cancelAnswerTimeout = 250 * time.Millisecond

// cancelRequestPause is how long a connection whose statement was
// cancelled waits after the cancel request before it is used again: the
// server may deliver the request to the backend a moment after it answered
// it, and must not cancel the next statement (pgx's
// CancelRequestContextWatcherHandler pauses as long, for the same reason).
const cancelRequestPause = 100 * time.Millisecond

// cancelRequestTimeout bounds the cancel request itself, as pgx bounds the
// one it sends when it closes a connection.
const cancelRequestTimeout = 15 * time.Second

// cancelRequestHandler is pgx's CancelRequestContextWatcherHandler with two
// changes. Its cancel request, once sent, is left to finish (the server
// closes its connection), in the background if need be, for up to
// cancelRequestTimeout (15 s): pgx's closes the request's connection when
// the statement is answered first, or after a fixed deadline, and PgBouncer
// (1.18 at least; its issue #801) exits with "FATAL ... bad client state: 0"
// when a cancel request's client leaves before PgBouncer has forwarded it,
// dropping every client of the pooler
// (TestReserveCancelledBehindPgBouncerLeavesThePoolerRunning). And the wait
// for the statement's answer is counted from the request's acknowledgement,
// not from its start, so that a slow pooler does not make the connection
// give up an answer that is on its way
// (TestReserveStatementThatCommitsBeforeItsCancelLands).
type cancelRequestHandler struct {
	conn *pgconn.PgConn
	// done is closed once the connection may be used again (the request
	// acknowledged and the pause over), or gaveUp is set.
	done   chan struct{}
	gaveUp bool // no acknowledgement within cancelAckTimeout: the connection must not be used again
}

func (h *cancelRequestHandler) HandleCancel(ctx context.Context) {
	markCut(ctx) // the statement was sent: a Reserve that fails so may have been granted
	acked, done := make(chan struct{}), make(chan struct{})
	h.done, h.gaveUp = done, false
	go func() {
		defer close(acked)
		ctx, cancel := context.WithTimeout(context.Background(), cancelRequestTimeout)
		defer cancel()
		_ = h.conn.CancelRequest(ctx)
	}()
	conn := h.conn.Conn()
	go func() {
		defer close(done)
		select {
		case <-acked:
			_ = conn.SetDeadline(time.Now().Add(cancelAnswerTimeout))
			time.Sleep(cancelRequestPause)
		case <-time.After(cancelAckTimeout):
			h.gaveUp = true
			_ = conn.SetDeadline(time.Now()) // a read waiting for the answer fails, and pgx closes the connection
		}
	}()
}

func (h *cancelRequestHandler) HandleUnwatchAfterCancel() {
	if h.conn.IsClosed() { // the answer never came; the request finishes in the background
		return
	}
	<-h.done
	if h.gaveUp { // answered, but the request may still land: on the next statement, were the connection used again
		_ = h.conn.Close(context.Background())
		return
	}
	_ = h.conn.Conn().SetDeadline(time.Time{})
}
