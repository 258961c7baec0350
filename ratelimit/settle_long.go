package ratelimit

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// settleChunk is the most reservations one call of pgadmit_settle is given.
// Up to migration 00016 the function joined a batch's reservations to
// their counters' names, and to what it settled, by position, in nested
// loops: its time grew with the square of the batch (on one counter: 250
// rows 36 ms, 1,000 rows 0.7 s, 10,000 rows 52 s in one call). Since, it
// grows with the batch, and the chunks bound how long one statement holds
// its counters' locks (and keep a database not yet migrated safe). A grant
// joined from many Reserves (a clean-up of everything a process holds) is
// settled by settleLong in calls of this many, and concurrent calls combine
// into calls of this many rows at most (reservations and leases). It is
// well above what one Reserve returns (MaxLimitsPerCall).
const settleChunk = 256

// settleLong settles a request of more than settleChunk reservations as
// one call would, in one round trip and one transaction (a pgx.Batch:
// one implicit transaction, or the caller's), in the lock order: it
// locks every counter first, then settles the reservations settleChunk at a
// time, their leases with the last ones. Each of those calls locks counters
// the first statement holds already, so none waits for a counter while it
// holds a reservation. Not combined with other calls, nor committed as a
// hot batch: a grant this long is a clean-up, not a request's settle.
func (l *Limiter) settleLong(ctx context.Context, r *settleRequest) (Settlement, error) {
	out, _, err := sendOnceMoreIfUnsent(l, ctx, func() ([]Settlement, []error, error) {
		s, err := l.settleLongOnce(ctx, r)
		return []Settlement{s}, nil, err
	})
	if err != nil {
		return Settlement{}, err
	}
	return out[0], nil
}

// settleLongOnce sends settleLong's batch once.
func (l *Limiter) settleLongOnce(ctx context.Context, r *settleRequest) (Settlement, error) {
	var call settleCall
	call.add(r)
	p := call.params()
	b := &pgx.Batch{}
	if call.keyless {
		// The counters of the reservations still open, as pgadmit_settle
		// reads them when the grant does not name them.
		queue(b, func(q db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, q, p.ReservationIds) })
	} else {
		// pgadmit_settle of no reservation and no lease locks the counters
		// it is given, and settles nothing.
		lock := p
		lock.ReservationIds, lock.Statuses, lock.ActualAmounts, lock.Reasons = []pgtype.UUID{}, []string{}, []float64{}, []string{}
		lock.LeaseIds, lock.LeaseReasons = []pgtype.UUID{}, []string{}
		queue(b, func(q db.DBTX) { _, _ = l.queries.AdmissionSettle(ctx, q, lock) })
	}
	n := len(p.ReservationIds)
	chunks := make([][]db.AdmissionSettleRow, (n+settleChunk-1)/settleChunk)
	for k := range chunks {
		lo, hi := k*settleChunk, min((k+1)*settleChunk, n)
		c := p
		c.ReservationIds, c.Statuses, c.ActualAmounts, c.Reasons = p.ReservationIds[lo:hi], p.Statuses[lo:hi], p.ActualAmounts[lo:hi], p.Reasons[lo:hi]
		if !call.keyless {
			c.ScopeTypes, c.ScopeKeys, c.Metrics = p.ScopeTypes[lo:hi], p.ScopeKeys[lo:hi], p.Metrics[lo:hi]
			c.WindowSeconds, c.WindowStarts = p.WindowSeconds[lo:hi], p.WindowStarts[lo:hi]
		}
		if hi < n { // the leases go with the last reservations, after them all
			c.LeaseIds, c.LeaseReasons = []pgtype.UUID{}, []string{}
		}
		queueRows(b, &chunks[k], func(q db.DBTX) { _, _ = l.queries.AdmissionSettle(ctx, q, c) })
	}
	if err := runBatch(ctx, l.conn, b); err != nil {
		return Settlement{}, wrapDBError(ctx, "settle", err)
	}
	// Each call numbers its reservations from 1: renumbered as sent whole.
	rows := make([]db.AdmissionSettleRow, 0, n+len(p.LeaseIds))
	for k, chunk := range chunks {
		for _, row := range chunk {
			if !row.IsLease {
				row.Ord += int32(k * settleChunk)
			}
			rows = append(rows, row)
		}
	}
	return r.outcome(call.demux(rows)), nil
}
