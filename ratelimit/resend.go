package ratelimit

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// resendsUnsent reports whether a Reserve or Commit/Release statement,
// combined or not, that failed with err is sent once more, at once. pgx
// says that none of it reached the server (pgconn.SafeToRetry: the
// connection the pool handed out was found closed as the statement was
// written), so the server cannot have run it, and sending it again cannot
// admit or settle anything twice; the pool drops the failed connection and
// hands out another. A statement that was written, and then lost its
// answer, is never sent again. Only on a pool: inside a caller's
// transaction (WithTx) the transaction is gone with its connection, and a
// single connection is closed for good. Nor once ctx, the statement's, has
// ended: pgx reports a statement it did not send for that as safe to retry
// too. A second failure is the callers'.
func (l *Limiter) resendsUnsent(ctx context.Context, err error) bool {
	return !l.inTx && !oneConnection(l.conn) && ctx.Err() == nil && pgconn.SafeToRetry(err)
}
