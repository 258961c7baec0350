package ratelimit

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// countLost counts n Reserve calls (or one block request of a Local limit)
// as lost (Stats.Lost) when err, their statement's failure, says that the
// statement was sent and got no answer (answerLost): the server may have
// committed their grants (or the block), which nobody knows of. Inside a caller's transaction nothing is lost: the transaction
// is gone with its answer, and rolled back.
func (l *Limiter) countLost(n int, err error, cut bool) {
	if !l.inTx && answerLost(err, cut) {
		l.lost.Add(int64(n))
	}
}

// countLostGiveBack counts a give-back of what nobody held that will not
// be given back as lost (Stats.Lost) and in part, the kind it is (dropped
// or failed). Lost first: Stats reads the parts first, so that no reading
// has them above Lost.
func (l *Limiter) countLostGiveBack(part *atomic.Int64) {
	l.lost.Add(1)
	part.Add(1)
}

// answerLost reports whether a statement that failed with err may have run
// to its commit without its answer. An error the server sent (a
// *pgconn.PgError, a cancelled statement's 57014 too) rolled it back, and
// pgx marks what it did not send as safe to retry (a context already over,
// a connection found closed first); a pool's Acquire that could not open a
// connection (a *pgconn.ConnectError: the server or the pooler down or
// restarting, a login refused) sent nothing of the statement either, though
// pgx does not mark it so; nor did a pool that was closed (puddle's
// ErrClosedPool, which pgxpool returns as it is). A context's error says nothing by
// itself: pgx reports a read that its context cut off, and a pool's Acquire
// that its context ended (nothing sent), with the same bare error; cut says
// that ConfigurePool's handler cancelled the statement while it ran on its
// connection (markCut). Anything else (a connection lost, an answer that
// could not be read) came after some of it was written.
func answerLost(err error, cut bool) bool {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	if errors.As(err, &pgErr) || errors.As(err, &connectErr) || errors.Is(err, puddle.ErrClosedPool) || pgconn.SafeToRetry(err) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return cut
	}
	return true
}

// cutMarkKey keys, in the context a Reserve statement runs in, the flag
// that markCut sets.
type cutMarkKey struct{}

// withCutMark returns ctx with a flag that markCut sets, and the flag.
func withCutMark(ctx context.Context) (context.Context, *atomic.Bool) {
	cut := new(atomic.Bool)
	return context.WithValue(ctx, cutMarkKey{}, cut), cut
}

// markCut notes, on the context of a statement that its context's end cut
// off while it ran on its connection, that it was sent (answerLost):
// ConfigurePool's handler calls it as it cancels the statement.
func markCut(ctx context.Context) {
	if cut, ok := ctx.Value(cutMarkKey{}).(*atomic.Bool); ok {
		cut.Store(true)
	}
}
