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
// too. Nor once a caller of the statement has left (callersWait): a
// request not yet sent is never sent for a caller who left, where it
// would hold capacity for nobody until its grant was released as
// abandoned; the callers still waiting get the failure. A second failure
// is the callers'. pgx says nothing was sent only of what it writes
// through pgconn's frontend: a hot batch (a pgx.Batch) in
// QueryExecModeExec goes by pgconn.ExecBatch, whose failed write is not
// marked, and is not sent again.
func (l *Limiter) resendsUnsent(ctx context.Context, err error) bool {
	return !l.inTx && !oneConnection(l.conn) && ctx.Err() == nil && callersWait(ctx) && pgconn.SafeToRetry(err)
}

// sendOnceMoreIfUnsent runs send, a Reserve or Commit/Release statement,
// and runs it once more when it failed before any of it reached the
// server (resendsUnsent).
func sendOnceMoreIfUnsent[Res any](l *Limiter, ctx context.Context, send func() ([]Res, []error, error)) ([]Res, []error, error) {
	res, errs, err := send()
	if err != nil && l.resendsUnsent(ctx, err) {
		return send()
	}
	return res, errs, err
}

// callersKey keys, in the context a statement runs in, the report of
// whether every caller of the statement still waits (withCallers).
type callersKey struct{}

// withCallers records in ctx, a statement's, whether its callers all
// still wait: the statement runs on after they leave (sendContext,
// statementContext), and ctx's own end says nothing of them.
func withCallers(ctx context.Context, allWait func() bool) context.Context {
	return context.WithValue(ctx, callersKey{}, allWait)
}

// callersWait reports whether every caller of ctx's statement still
// waits; true when ctx is a caller's own (nothing recorded), whose end
// resendsUnsent checks itself.
func callersWait(ctx context.Context) bool {
	allWait, ok := ctx.Value(callersKey{}).(func() bool)
	return !ok || allWait()
}
