package ratelimit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementConn returns the connection a Reserve statement runs on: on a
// pool, one acquired for it, returned as acquired too, for the caller to
// release; otherwise the Limiter's Executor. An error is the pool's: nothing
// was sent. countLost must tell the two apart, and pgx does not: it reports
// a statement whose answer its context cut off and an Acquire its context
// ended with the same bare context error. Acquired here, the statement pays
// what the pool's Query would have paid to acquire it, no more.
func (l *Limiter) statementConn(ctx context.Context) (Executor, *pgxpool.Conn, error) {
	pool, ok := l.conn.(*pgxpool.Pool)
	if !ok {
		return l.conn, nil, nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, c, nil
}

// countLost counts n Reserve calls as lost (Stats.Lost) when err, their
// statement's failure on a connection it had, says that the statement was
// sent and got no answer (answerLost): the server may have committed their
// grants, which nobody knows of. Inside a caller's transaction nothing is
// lost: the transaction is gone with its answer, and rolled back.
func (l *Limiter) countLost(n int, err error) {
	if !l.inTx && answerLost(err) {
		l.lost.Add(int64(n))
	}
}

// answerLost reports whether a statement that failed with err on its
// connection may have run to its commit without its answer: an error the
// server sent (a *pgconn.PgError, a cancelled statement's 57014 too) rolled
// it back, and pgx marks what it did not send as safe to retry (a context
// already over, a connection found closed first); anything else (a
// connection lost, a read its context cut off, an answer that could not be
// read) came after some of it was written.
func answerLost(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !pgconn.SafeToRetry(err)
}
