package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// A combined batch in which two requests draw on one counter has found a
// hot counter: one that the next batch, of Reserve or of Commit, will most
// likely wait for. A Reserve batch in which two admissions take a slot of
// one concurrency scope has found a hot scope: its slots are decided under
// a transaction advisory lock that the next batch on the scope waits for,
// from another instance (settling releases leases without it). Such a
// batch runs as a procedure of schema/00009_hot_batches.sql instead of a
// function: its transaction releases the counter rows and scope locks
// without waiting for its commit's flush, and the procedure returns only
// after a second, durable commit has flushed it. The next batch on the
// counter or scope then waits for this one's execution, not for its flush
// too, and no caller is answered before its admission or settlement is on
// disk. A procedure can commit only outside a transaction block, which a
// combined batch always is.
//
// A hot batch that fails after its first commit (a cancel in the moment
// before its flush, a lost connection) has admitted what its callers are
// told failed, as a lost commit acknowledgement has; the combiner therefore
// does not send its requests again one by one (rejectedInput).

// hotBatches reports whether this Limiter may send hot batches: not in a
// caller's transaction, where a procedure cannot commit.
func (l *Limiter) hotBatches() bool { return !l.inTx && !l.opts.coldBatches }

// hotCounts counts the statements sent as hot batches.
type hotCounts struct {
	reserves, settles atomic.Int64
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

// callHot runs the CALL of a hot-batch procedure that call sends through
// its db.DBTX and scans its one row of arrays into dest. sqlc (v1.31)
// gives a CALL no result columns, so the generated method is :exec and the
// row is scanned here.
func callHot(ctx context.Context, conn Executor, call func(db.DBTX), dest ...any) error {
	var r recorder
	call(&r)
	return conn.QueryRow(ctx, r.sql, r.args...).Scan(dest...)
}

// reserveArrays is the row of pgadmit_hot_reserve and
// pgadmit_hot_reserve_windows: the columns of db.AdmissionReserveRow, one
// array each.
type reserveArrays struct {
	admission, ord              []int32
	isLease, fits               []bool
	grantID                     []pgtype.UUID
	current, reserved           []float64
	windowStart, resetAt, dbNow []time.Time
	refusal                     []string
}

func (a *reserveArrays) dest() []any {
	return []any{&a.admission, &a.isLease, &a.ord, &a.fits, &a.grantID, &a.current, &a.reserved,
		&a.windowStart, &a.resetAt, &a.dbNow, &a.refusal}
}

func (a *reserveArrays) rows() ([]db.AdmissionReserveRow, error) {
	n := len(a.admission)
	if !sameLength(n, len(a.isLease), len(a.ord), len(a.fits), len(a.grantID), len(a.current), len(a.reserved),
		len(a.windowStart), len(a.resetAt), len(a.dbNow), len(a.refusal)) {
		return nil, fmt.Errorf("ratelimit: reserve: hot batch returned arrays of different lengths")
	}
	rows := make([]db.AdmissionReserveRow, n)
	for i := range rows {
		rows[i] = db.AdmissionReserveRow{
			Admission: a.admission[i], IsLease: a.isLease[i], Ord: a.ord[i], Fits: a.fits[i],
			GrantID: a.grantID[i], CurrentValue: a.current[i], ReservedValue: a.reserved[i],
			WindowStart: a.windowStart[i], ResetAt: a.resetAt[i], DbNow: a.dbNow[i], Refusal: a.refusal[i],
		}
	}
	return rows, nil
}

// settleArrays is the row of pgadmit_hot_settle: the columns of
// db.AdmissionSettleRow, one array each.
type settleArrays struct {
	isLease, settled []bool
	ord              []int32
	id               []pgtype.UUID
	status, metric   []string
	reserved, actual []float64
}

func (a *settleArrays) dest() []any {
	return []any{&a.isLease, &a.ord, &a.id, &a.settled, &a.status, &a.metric, &a.reserved, &a.actual}
}

func (a *settleArrays) rows() ([]db.AdmissionSettleRow, error) {
	n := len(a.ord)
	if !sameLength(n, len(a.isLease), len(a.settled), len(a.id), len(a.status), len(a.metric), len(a.reserved), len(a.actual)) {
		return nil, fmt.Errorf("ratelimit: settle: hot batch returned arrays of different lengths")
	}
	rows := make([]db.AdmissionSettleRow, n)
	for i := range rows {
		rows[i] = db.AdmissionSettleRow{
			IsLease: a.isLease[i], Ord: a.ord[i], ID: a.id[i], Settled: a.settled[i], Status: a.status[i],
			Metric: a.metric[i], ReservedAmount: a.reserved[i], ActualAmount: a.actual[i],
		}
	}
	return rows, nil
}

func sameLength(n int, lengths ...int) bool {
	for _, l := range lengths {
		if l != n {
			return false
		}
	}
	return true
}

// hotReserveRows decides a reserve batch on a hot counter, with the same
// rows as reserveRows; call sends one of the hot reserve procedures.
func (l *Limiter) hotReserveRows(ctx context.Context, call func(db.DBTX)) ([]db.AdmissionReserveRow, error) {
	defer l.hot.reserves.Add(1) // counted once answered, as the combiner counts statements
	var out reserveArrays
	if err := callHot(ctx, l.conn, call, out.dest()...); err != nil {
		return nil, err
	}
	return out.rows()
}

// hotSettleRows settles a batch on a hot counter, with the same rows as
// AdmissionSettle.
func (l *Limiter) hotSettleRows(ctx context.Context, p db.AdmissionSettleParams) ([]db.AdmissionSettleRow, error) {
	defer l.hot.settles.Add(1) // counted once answered, as the combiner counts statements
	var out settleArrays
	err := callHot(ctx, l.conn, func(q db.DBTX) {
		_ = l.queries.AdmissionHotSettle(ctx, q, db.AdmissionHotSettleParams(p))
	}, out.dest()...)
	if err != nil {
		return nil, err
	}
	return out.rows()
}
