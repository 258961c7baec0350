package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// A combined batch in which two requests draw on one counter has found a
// hot counter: one that the next batch, of Reserve or of Commit, will most
// likely wait for. A Reserve batch in which two admissions take a slot of
// one concurrency scope has found a hot scope: its slots are decided under
// a transaction advisory lock that the next batch on the scope waits for,
// from another instance (settling releases leases without it). Such a
// batch is sent as any batch is, followed in the same round trip and the
// same implicit transaction by CALL pgadmit_hot_commit()
// (schema/00012_hot_commit.sql), which commits the transaction without
// waiting for its flush, so that its counter rows and scope locks are
// released at once, and returns only after a second, durable commit has
// flushed it. The next batch on the counter or scope then waits for this
// one's execution, not for its flush too, and no caller is answered before
// its admission or settlement is on disk. A procedure can commit only
// outside a transaction block, which a combined batch always is.
//
// The batch's rows reach the client with the procedure's outcome: the
// server keeps them in its output buffer until the round trip's Sync, or
// until an error, which it sends at once (not before the procedure runs).
// When they have come and the procedure failed (a cancel request landing
// in the moment of its commit), the batch may or may not have committed:
// hotRows returns the rows with the error, and Reserve tells its callers
// the batch failed and releases every grant the rows name in the
// background (releaseUnconfirmed; Limiter.Close waits for it). A lost
// connection mostly loses the rows with the rest of the answer; what the
// batch committed then lapses, as after any lost commit acknowledgement.
// The combiner does not send the requests again one by one
// (rejectedInput), which could admit them twice.

// hotBatches reports whether this Limiter may send hot batches: not in a
// caller's transaction, nor where pgx sends a batch as one multi-statement
// query (an implicit transaction block); a procedure cannot commit in
// either.
func (l *Limiter) hotBatches() bool {
	return !l.inTx && !l.oneQueryBatches.Load() && !l.opts.coldBatches
}

// simpleProtocol reports whether conn, a pool or a connection (of a pool's
// too), runs its statements with the simple protocol
// (pgx.QueryExecModeSimpleProtocol). An Executor of another kind (a
// wrapper of the caller's own) is found out by its first hot batch
// (hotCommitRefused).
func simpleProtocol(conn Executor) bool {
	return execMode(conn) == pgx.QueryExecModeSimpleProtocol
}

// hotCommitRefused reports that a hot batch failed because
// pgadmit_hot_commit could not commit (2D000, invalid transaction
// termination): the Executor sent the batch as one multi-statement query,
// an implicit transaction block, as the simple protocol does, and
// simpleProtocol could not tell. The procedure raises it before it
// commits, so the whole batch was rolled back and may be sent again as a
// plain statement. hotRows then sends no hot batch on the Limiter again.
func hotCommitRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "2D000"
}

// sharesCounter reports whether two of the requests draw on one counter.
// counters lists the counters of request i; a request may list one twice.
func sharesCounter(n int, counters func(i int, yield func(counterKey))) bool {
	if n < 2 {
		return false
	}
	owner := make(map[counterKey]int, n)
	shared := false
	for i := range n {
		counters(i, func(k counterKey) {
			if j, ok := owner[k]; ok && j != i {
				shared = true
			}
			owner[k] = i
		})
		if shared {
			return true
		}
	}
	return false
}

// hotAdmissions reports whether a reserve batch is on a hot counter or a
// hot concurrency scope.
func hotAdmissions(batch []*admission) bool {
	return sharesCounter(len(batch), func(i int, yield func(counterKey)) {
		for _, w := range batch[i].windows {
			yield(w.counter())
		}
		for _, c := range batch[i].leases {
			yield(c.scopeKey())
		}
	})
}

// hotSettles reports whether a settle batch is on a hot counter, as far as
// the grants name their counters.
func hotSettles(batch []*settleRequest) bool {
	return sharesCounter(len(batch), func(i int, yield func(counterKey)) {
		if !batch[i].knowsCounters() {
			return
		}
		for _, r := range batch[i].reservations {
			yield(r.counter())
		}
	})
}

// hotRows sends the statement that call sends and, after it in one
// pgx.Batch (one round trip, one implicit transaction), AdmissionHotCommit,
// and collects the statement's rows by position into T. It returns the
// rows and nil once the commit is flushed; nil and the error when the
// statement failed (rolled back, nothing written); the rows and the error
// when the statement answered and the procedure did not, and the batch may
// or may not have committed. A batch whose commit the Executor refused
// (hotCommitRefused) was rolled back whole: it is sent again alone, as a
// plain statement, and the Limiter sends no hot batch after it. A hot batch
// answered is marked on ctx (markHot), for the combiner to count.
func hotRows[T any](ctx context.Context, l *Limiter, call func(db.DBTX)) ([]T, error) {
	var b pgx.Batch
	var rows []T // nil unless the statement's rows were read whole (pgx.CollectRows)
	queueRows(&b, &rows, call)
	queue(&b, func(q db.DBTX) { _ = l.queries.AdmissionHotCommit(ctx, q) })
	err := l.conn.SendBatch(ctx, &b).Close()
	if hotCommitRefused(err) {
		l.oneQueryBatches.Store(true)
		var plain pgx.Batch
		queueRows(&plain, &rows, call)
		if err := l.conn.SendBatch(ctx, &plain).Close(); err != nil {
			return nil, err
		}
		return rows, nil
	}
	markHot(ctx)
	if err != nil && rows == nil {
		return nil, err
	}
	if err != nil {
		return rows, &unconfirmedError{err: err}
	}
	return rows, nil
}

// unconfirmedError is the failure of a hot batch's procedure after the
// batch answered (hotRows): the batch may have committed, whatever the
// error's class (a privilege its second transaction lacks fails with
// 42501 after the first one committed), so the combiner must not send its
// requests again one by one (rejectedInput), which would admit or settle
// them a second time.
type unconfirmedError struct{ err error }

func (e *unconfirmedError) Error() string { return e.err.Error() }
func (e *unconfirmedError) Unwrap() error { return e.err }

// hotReserveRows decides a reserve batch on a hot counter or scope, with
// the same rows as reserveRows; call sends AdmissionReserve or
// AdmissionReserveWindows. See hotRows for what it returns.
func (l *Limiter) hotReserveRows(ctx context.Context, call func(db.DBTX)) ([]db.AdmissionReserveRow, error) {
	return hotRows[db.AdmissionReserveRow](ctx, l, call)
}

// hotSettleRows settles a batch on a hot counter, with the same rows as
// AdmissionSettle. A settlement whose commit is unconfirmed is a failure
// like any other: a caller who tries again learns what it settled.
func (l *Limiter) hotSettleRows(ctx context.Context, p db.AdmissionSettleParams) ([]db.AdmissionSettleRow, error) {
	rows, err := hotRows[db.AdmissionSettleRow](ctx, l, func(q db.DBTX) {
		_, _ = l.queries.AdmissionSettle(ctx, q, p)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// releaseUnconfirmed releases every grant that rows name: the rows of a
// hot batch whose commit could not be confirmed (hotRows), whose callers
// are told it failed, whatever the release does: it runs in the background
// (giveBackUnheld), so that neither they nor the batches queued behind
// this one wait for its tries. Rows the batch never committed are not
// found, and left alone.
func (l *Limiter) releaseUnconfirmed(rows []db.AdmissionReserveRow) {
	var g Grant
	for _, row := range rows {
		switch {
		case !row.GrantID.Valid:
		case row.IsLease:
			g.Leases = append(g.Leases, Lease{ID: idString(row.GrantID)})
		default:
			g.Reservations = append(g.Reservations, Reservation{ID: idString(row.GrantID)})
		}
	}
	if len(g.Reservations)+len(g.Leases) == 0 {
		return
	}
	l.giveBackUnheld(func(handedOver time.Time) { l.releaseUnheld(g, reasonUnconfirmed, handedOver) })
}
