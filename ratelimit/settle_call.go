package ratelimit

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// settleBatch settles requests in one call of pgadmit_settle, committed by a
// procedure sent after it when the batch is on a hot counter (hotbatch.go).
// A statement that failed before any of it reached the server is sent once
// more (resendsUnsent).
func (l *Limiter) settleBatch(ctx context.Context, batch []*settleRequest) ([]Settlement, []error, error) {
	return sendOnceMoreIfUnsent(l, ctx, func() ([]Settlement, []error, error) { return l.settleStatement(ctx, batch) })
}

// settleStatement sends settleBatch's statement once.
func (l *Limiter) settleStatement(ctx context.Context, batch []*settleRequest) ([]Settlement, []error, error) {
	if len(batch) == 1 && len(batch[0].ids) == 1 && len(batch[0].leaseIDs) == 0 && batch[0].knowsCounters() {
		out, err := l.settleOne(ctx, batch[0])
		if err != nil {
			return nil, nil, err
		}
		return []Settlement{out}, []error{nil}, nil
	}
	var call settleCall
	for _, r := range batch {
		call.add(r)
	}
	var rows []db.AdmissionSettleRow
	var err error
	if l.hotBatches() && hotSettles(batch) {
		rows, err = l.hotSettleRows(ctx, call.params())
	} else {
		rows, err = l.queries.AdmissionSettle(ctx, l.conn, call.params())
	}
	if err != nil {
		return nil, nil, wrapDBError(ctx, "settle", err)
	}
	d := call.demux(rows)
	out := make([]Settlement, len(batch))
	for i, r := range batch {
		out[i] = r.outcome(d)
	}
	return out, make([]error, len(batch)), nil
}

// settleCall builds one call of pgadmit_settle for any number of requests.
type settleCall struct {
	p db.AdmissionSettleParams
	// keyless: some request did not name its counters; the call then sends
	// none and the function reads them from the reservations.
	keyless bool
	nLeases int
	// leaseAt maps the position of a lease as sent (in id order, the lease
	// lock order: see idOrder) to its position as added; nil when they
	// are the same.
	leaseAt []int
}

// add appends a request, in the lock order of its counters when it names
// them (pgadmit_settle then locks them without reading the reservations
// first, and checks them against the reservations it settles).
func (c *settleCall) add(r *settleRequest) {
	r.rFirst, r.lFirst = len(c.p.ReservationIds), c.nLeases
	r.sent = make([]int, len(r.ids))
	for i := range r.sent {
		r.sent[i] = i
	}
	if !r.knowsCounters() {
		c.keyless = true
	} else {
		rs := r.reservations
		slices.SortStableFunc(r.sent, func(i, j int) int {
			return cmp.Or(rs[i].counter().compare(rs[j].counter()), rs[i].WindowStart.Compare(rs[j].WindowStart))
		})
	}
	p := &c.p
	for _, i := range r.sent {
		p.ReservationIds = append(p.ReservationIds, r.ids[i])
		p.Statuses = append(p.Statuses, r.status)
		p.ActualAmounts = append(p.ActualAmounts, r.amounts[i])
		p.Reasons = append(p.Reasons, r.reservationReason())
		if !c.keyless {
			res := r.reservations[i]
			p.ScopeTypes = append(p.ScopeTypes, res.ScopeType)
			p.ScopeKeys = append(p.ScopeKeys, res.ScopeKey)
			p.Metrics = append(p.Metrics, res.Metric)
			p.WindowSeconds = append(p.WindowSeconds, int32(res.Window/time.Second))
			p.WindowStarts = append(p.WindowStarts, res.WindowStart)
		}
	}
	for _, id := range r.leaseIDs {
		p.LeaseIds = append(p.LeaseIds, id)
		p.LeaseReasons = append(p.LeaseReasons, r.reason)
	}
	c.nLeases += len(r.leaseIDs)
}

// params is the call's arguments. Every array is non-NULL, except the
// counter keys when some request did not name them. The leases go in id
// order (demux maps them back).
func (c *settleCall) params() db.AdmissionSettleParams {
	p := c.p
	if c.keyless {
		p.ScopeTypes, p.ScopeKeys, p.Metrics, p.WindowSeconds, p.WindowStarts = nil, nil, nil, nil, nil
	} else if p.ScopeTypes == nil {
		p.ScopeTypes, p.ScopeKeys, p.Metrics, p.WindowSeconds, p.WindowStarts = []string{}, []string{}, []string{}, []int32{}, []time.Time{}
	}
	if p.ReservationIds == nil {
		p.ReservationIds, p.Statuses, p.ActualAmounts, p.Reasons = []pgtype.UUID{}, []string{}, []float64{}, []string{}
	}
	if p.LeaseIds == nil {
		p.LeaseIds, p.LeaseReasons = []pgtype.UUID{}, []string{}
	}
	if len(p.LeaseIds) > 1 {
		c.leaseAt = idOrder(p.LeaseIds)
		p.LeaseIds, p.LeaseReasons = permuted(p.LeaseIds, c.leaseAt), permuted(p.LeaseReasons, c.leaseAt)
	}
	return p
}

// settleRows is a call's rows by position: reservations and leases in the
// order sent.
type settleRows struct {
	reservations []db.AdmissionSettleRow
	leases       []db.AdmissionSettleRow
}

func (c *settleCall) demux(rows []db.AdmissionSettleRow) settleRows {
	d := settleRows{
		reservations: make([]db.AdmissionSettleRow, len(c.p.ReservationIds)),
		leases:       make([]db.AdmissionSettleRow, c.nLeases),
	}
	for _, row := range rows {
		k := int(row.Ord) - 1
		switch {
		case row.IsLease && k >= 0 && k < len(d.leases):
			if c.leaseAt != nil {
				k = c.leaseAt[k]
			}
			d.leases[k] = row
		case !row.IsLease && k >= 0 && k < len(d.reservations):
			d.reservations[k] = row
		}
	}
	reportWhatTheWinnerLeft(d.reservations)
	return d
}

// reportWhatTheWinnerLeft handles one reservation settled twice in a batch
// (a retry racing its original, a Commit racing a Release): the settle that
// lost read the row as it was before the statement, so it is reported as
// the one that won left it, as it would be had it waited for the row.
func reportWhatTheWinnerLeft(rows []db.AdmissionSettleRow) {
	for k, lost := range rows {
		if lost.Settled {
			continue
		}
		for _, won := range rows {
			if won.Settled && won.ID == lost.ID {
				rows[k].Status, rows[k].ActualAmount = won.Status, won.ActualAmount
				break
			}
		}
	}
}

// settleOne settles a grant of one reservation (whose counter it names)
// with the scalar pgadmit_settle_one.
func (l *Limiter) settleOne(ctx context.Context, r *settleRequest) (Settlement, error) {
	res := r.reservations[0]
	row, err := l.queries.AdmissionSettleOne(ctx, l.conn, db.AdmissionSettleOneParams{
		ReservationID: r.ids[0], ScopeType: res.ScopeType, ScopeKey: res.ScopeKey, Metric: res.Metric,
		WindowSeconds: int32(res.Window / time.Second), WindowStart: res.WindowStart,
		Status: r.status, ActualAmount: r.amounts[0], Reason: r.reservationReason(),
	})
	if err != nil {
		return Settlement{}, wrapDBError(ctx, "settle", err)
	}
	r.sent, r.rFirst, r.lFirst = []int{0}, 0, 0
	return r.outcome(settleRows{reservations: []db.AdmissionSettleRow{{
		Ord: 1, ID: r.ids[0], Settled: row.Settled, Status: row.Status, Metric: row.Metric,
		ReservedAmount: row.ReservedAmount, ActualAmount: row.ActualAmount,
	}}}), nil
}

// releaseIDs is the call of pgadmit_settle that releases reservations
// known by id alone (recovery, prune, finishing a task), with reason.
func releaseIDs(ids []pgtype.UUID, reason string) db.AdmissionSettleParams {
	return settleRequest{ids: ids, amounts: make([]float64, len(ids)), status: StatusReleased, reason: reason}.alone()
}

// releaseLeaseIDs is the call of pgadmit_settle that releases leases, with
// reason.
func releaseLeaseIDs(ids []pgtype.UUID, reason string) db.AdmissionSettleParams {
	return settleRequest{leaseIDs: ids, status: StatusReleased, reason: reason}.alone()
}

// alone is the call of pgadmit_settle that carries r by itself.
func (r settleRequest) alone() db.AdmissionSettleParams {
	var c settleCall
	c.add(&r)
	return c.params()
}

// settledCount counts the reservations a pgadmit_settle call settled.
func settledCount(rows []db.AdmissionSettleRow) int64 {
	var n int64
	for _, row := range rows {
		if row.Settled && !row.IsLease {
			n++
		}
	}
	return n
}
