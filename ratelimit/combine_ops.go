package ratelimit

import (
	"context"
	"sync/atomic"

	"github.com/pgadmit/pgadmit/db"
)

// op is one call the combiner carries: an admission (Reserve) or a
// settlement (Commit, Release). Concurrent calls of both kinds share one
// statement and one transaction: a process's settlements free capacity and
// its admissions take it in the same commit, and a hot counter row is
// locked once for both.
type op struct {
	admission *admission
	settle    *settleRequest
}

// opCounts counts the calls the combiner carried, by kind.
type opCounts struct {
	reserves, settles atomic.Int64
}

// opResult is an op's outcome.
type opResult struct {
	grant      Grant
	settlement Settlement
}

// runOps runs a batch of ops in as few statements as its kinds allow: a
// settlement or admission alone takes its scalar function, a batch of one
// kind its batch function, a mixed batch one call of pgadmit_reserve that
// settles first. A settlement whose grant does not name its counters goes
// in a statement of its own first (the mixed call needs them).
func (l *Limiter) runOps(ctx context.Context, ops []*op) ([]opResult, []error, error) {
	res, errs := make([]opResult, len(ops)), make([]error, len(ops))
	var adm, set, keyless []int
	for i, o := range ops {
		if l.opCounts != nil {
			if o.admission != nil {
				l.opCounts.reserves.Add(1)
			} else {
				l.opCounts.settles.Add(1)
			}
		}
		switch {
		case o.admission != nil:
			adm = append(adm, i)
		case o.settle.knowsCounters():
			set = append(set, i)
		default:
			keyless = append(keyless, i)
		}
	}
	if len(adm) == 0 || len(keyless) > 0 {
		alone := keyless
		if len(adm) == 0 {
			alone = append(alone, set...)
			set = nil
		}
		if err := l.runSettles(ctx, ops, alone, res); err != nil {
			return nil, nil, err
		}
	}
	if len(adm) == 0 {
		return res, errs, nil
	}
	if len(set) == 0 {
		batch := make([]*admission, len(adm))
		for k, i := range adm {
			batch[k] = ops[i].admission
		}
		grants, gerrs, err := l.reserveBatch(ctx, batch)
		if err != nil {
			return nil, nil, err
		}
		for k, i := range adm {
			res[i].grant, errs[i] = grants[k], gerrs[k]
		}
		return res, errs, nil
	}
	return res, errs, l.runMixed(ctx, ops, adm, set, res, errs)
}

// runSettles settles the ops at idx in one statement of their own.
func (l *Limiter) runSettles(ctx context.Context, ops []*op, idx []int, res []opResult) error {
	if len(idx) == 0 {
		return nil
	}
	batch := make([]*settleRequest, len(idx))
	for k, i := range idx {
		batch[k] = ops[i].settle
	}
	out, _, err := l.settleBatch(ctx, batch)
	if err != nil {
		return err
	}
	for k, i := range idx {
		res[i].settlement = out[k]
	}
	return nil
}

// runMixed settles the ops at set and decides the admissions at adm in
// one call of pgadmit_reserve.
func (l *Limiter) runMixed(ctx context.Context, ops []*op, adm, set []int, res []opResult, errs []error) error {
	var p db.AdmissionReserveParams
	for _, i := range adm {
		ops[i].admission.appendTo(&p)
	}
	var call settleCall
	for _, i := range set {
		call.add(ops[i].settle)
	}
	s := call.params()
	p.SIds, p.SScopeTypes, p.SScopeKeys, p.SMetrics = s.ReservationIds, s.ScopeTypes, s.ScopeKeys, s.Metrics
	p.SWindowSeconds, p.SWindowStarts = s.WindowSeconds, s.WindowStarts
	p.SStatuses, p.SActualAmounts, p.SReasons = s.Statuses, s.ActualAmounts, s.Reasons
	p.LIds, p.LReasons = s.LeaseIds, s.LeaseReasons
	rows, err := l.queries.AdmissionReserve(ctx, l.conn, p)
	if err != nil {
		return wrapDBError("reserve and settle", err)
	}
	byAdmission, settled := splitReserveRows(rows, len(adm), &call)
	for k, i := range adm {
		res[i].grant, errs[i] = ops[i].admission.decide(byAdmission[k])
	}
	for _, i := range set {
		res[i].settlement = ops[i].settle.outcome(settled)
	}
	return nil
}

// splitReserveRows sorts pgadmit_reserve's rows: the limits by admission,
// and the settlements by position in call.
func splitReserveRows(rows []db.AdmissionReserveRow, admissions int, call *settleCall) ([][]db.AdmissionReserveRow, settleRows) {
	byAdmission := make([][]db.AdmissionReserveRow, admissions)
	var settled []db.AdmissionSettleRow
	for _, row := range rows {
		switch row.Kind {
		case kindWindow, kindConcurrent:
			if i := int(row.Admission) - 1; i >= 0 && i < admissions {
				byAdmission[i] = append(byAdmission[i], row)
			}
		case kindReservation, kindLease:
			settled = append(settled, db.AdmissionSettleRow{
				IsLease: row.Kind == kindLease, Ord: row.Ord, ID: row.GrantID, Settled: row.Settled,
				Status: row.Status, Metric: row.Metric, ReservedAmount: row.ReservedAmount, ActualAmount: row.ActualAmount,
			})
		}
	}
	if call == nil {
		return byAdmission, settleRows{}
	}
	return byAdmission, call.demux(settled)
}

// The kinds of pgadmit_reserve's rows.
const (
	kindWindow      = "window"
	kindConcurrent  = "concurrent"
	kindReservation = "reservation"
	kindLease       = "lease"
)

// releaseAbandonedOp gives back what a combined Reserve granted after its
// caller had stopped waiting.
func (l *Limiter) releaseAbandonedOp(r opResult) {
	if !r.grant.Empty() {
		l.releaseAbandoned(r.grant)
	}
}
