package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// Reservation statuses.
const (
	StatusReserved  = "reserved"
	StatusCommitted = "committed"
	StatusReleased  = "released"
	// StatusUnknown is reported for a reservation id that names no row
	// (pruned long ago, or never written).
	StatusUnknown = "unknown"
)

// Settlement reports what Commit or Release did.
type Settlement struct {
	// Reservations has one outcome per reservation of the grant, in order.
	Reservations []ReservationOutcome
	// LeasesReleased counts the grant's leases this call released;
	// LeasesAlreadyReleased the others: released before it, or no longer
	// there (pruned).
	LeasesReleased        int
	LeasesAlreadyReleased int
}

// ReservationOutcome is the fate of one reservation.
type ReservationOutcome struct {
	ID     string
	Metric string
	// Status is the reservation's status after the call.
	Status string
	// Settled is true when this call committed or released it; false when it
	// was already finished (the call was a no-op for it).
	Settled  bool
	Reserved float64
	// Actual is the committed amount (committed reservations only).
	Actual float64
}

// Overage is how much the actual amount exceeded the reserved estimate.
func (o ReservationOutcome) Overage() float64 { return max(o.Actual-o.Reserved, 0) }

// AlreadySettled reports a no-op: nothing in the grant was still open.
func (s Settlement) AlreadySettled() bool {
	if s.LeasesReleased > 0 {
		return false
	}
	for _, r := range s.Reservations {
		if r.Settled {
			return false
		}
	}
	return true
}

// Overages lists the reservations committed above their estimate. The
// overage is recorded in the window's used amount, never lost.
func (s Settlement) Overages() []ReservationOutcome {
	var out []ReservationOutcome
	for _, r := range s.Reservations {
		if r.Settled && r.Status == StatusCommitted && r.Overage() > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Commit settles a grant with what was really used: each reservation's
// window moves from reserved to used by actual[metric] (the estimate when
// the metric is absent; an actual above the estimate is recorded in full and
// reported in Settlement.Overages). The grant's leases are released: the
// request is over. Idempotent: reservations already committed or released
// are left alone and reported with Settled false. One round trip.
func (l *Limiter) Commit(ctx context.Context, grant Grant, actual map[string]float64) (Settlement, error) {
	for metric, v := range actual {
		if err := validateAmount(fmt.Sprintf("actual[%q]", metric), v); err != nil {
			return Settlement{}, err
		}
	}
	amounts := make([]float64, len(grant.Reservations))
	for i, r := range grant.Reservations {
		amounts[i] = r.Amount
		if v, ok := actual[r.Metric]; ok {
			amounts[i] = v
		}
	}
	return l.settle(ctx, grant, StatusCommitted, "committed", amounts)
}

// Release gives a grant back unused: reservations are released, leases
// ended. reason is recorded on each (at most MaxReasonBytes of valid UTF-8
// without NUL bytes; a *ValidationError otherwise, and nothing is
// written). Idempotent like Commit. One round trip.
func (l *Limiter) Release(ctx context.Context, grant Grant, reason string) (Settlement, error) {
	if err := validateReason(reason); err != nil {
		return Settlement{}, err
	}
	return l.settle(ctx, grant, StatusReleased, reason, make([]float64, len(grant.Reservations)))
}

func (l *Limiter) settle(ctx context.Context, grant Grant, status, reason string, amounts []float64) (Settlement, error) {
	reservationIDs := make([]string, len(grant.Reservations))
	for i, r := range grant.Reservations {
		reservationIDs[i] = r.ID
	}
	ids, err := parseIDs("Reservations.ID", reservationIDs)
	if err != nil {
		return Settlement{}, err
	}
	leaseIDs, err := parseIDs("Leases.ID", leaseIDStrings(grant.Leases))
	if err != nil {
		return Settlement{}, err
	}
	if len(ids) == 0 && len(leaseIDs) == 0 {
		return Settlement{}, nil
	}
	first := phaseCounters
	if len(ids) == 0 {
		first = phaseRows
	}
	if err := l.enter(opName(status), first, phaseRows); err != nil {
		return Settlement{}, err
	}
	p, sent := grantSettleParams(grant.Reservations, ids, amounts, status, reason, leaseIDs)
	rows, err := l.queries.AdmissionSettle(ctx, l.conn, p)
	if err != nil {
		return Settlement{}, wrapDBError(status, err)
	}
	return settlementOf(rows, sent), nil
}

// grantSettleParams is the call of pgadmit_settle for a grant's
// reservations (ids, with their actual amounts) and leases. When the grant
// names every reservation's counter, they are sent in the lock order of
// their counters, which pgadmit_settle then locks without reading the
// reservations first (it checks them against the reservations it settles);
// a grant rebuilt from ids alone is sent as is, and the function reads
// them. sent lists the grant's reservations (indexes) in the order sent.
func grantSettleParams(rs []Reservation, ids []pgtype.UUID, amounts []float64, status, reason string, leaseIDs []pgtype.UUID) (db.AdmissionSettleParams, []int) {
	sent := make([]int, len(rs))
	for i := range sent {
		sent[i] = i
	}
	for _, r := range rs {
		if r.ScopeType == "" || r.ScopeKey == "" || r.Metric == "" || r.WindowStart.IsZero() ||
			r.Window <= 0 || r.Window%time.Second != 0 || r.Window > MaxWindow {
			return settleParams(ids, amounts, status, reason, leaseIDs, reason), sent
		}
	}
	slices.SortStableFunc(sent, func(i, j int) int {
		a, b := rs[i], rs[j]
		return cmp.Or(
			strings.Compare(a.ScopeType, b.ScopeType),
			strings.Compare(a.ScopeKey, b.ScopeKey),
			strings.Compare(a.Metric, b.Metric),
			cmp.Compare(a.Window, b.Window),
			a.WindowStart.Compare(b.WindowStart),
		)
	})
	n := len(rs)
	p := settleParams(make([]pgtype.UUID, n), make([]float64, n), status, reason, leaseIDs, reason)
	p.ScopeTypes, p.ScopeKeys, p.Metrics = make([]string, n), make([]string, n), make([]string, n)
	p.WindowSeconds, p.WindowStarts = make([]int32, n), make([]time.Time, n)
	for k, i := range sent {
		r := rs[i]
		p.ReservationIds[k], p.ActualAmounts[k] = ids[i], amounts[i]
		p.ScopeTypes[k], p.ScopeKeys[k], p.Metrics[k] = r.ScopeType, r.ScopeKey, r.Metric
		p.WindowSeconds[k], p.WindowStarts[k] = int32(r.Window/time.Second), r.WindowStart
	}
	return p, sent
}

// settleParams is a call of pgadmit_settle: reservations settled to status
// (with actual amounts when committed) with reason, and leases released
// with leaseReason.
func settleParams(ids []pgtype.UUID, amounts []float64, status, reason string, leaseIDs []pgtype.UUID, leaseReason string) db.AdmissionSettleParams {
	if leaseIDs == nil {
		leaseIDs = []pgtype.UUID{}
	}
	return db.AdmissionSettleParams{
		ReservationIds: ids, ActualAmounts: amounts, Status: status,
		Reason:   pgtype.Text{String: reason, Valid: reason != ""},
		LeaseIds: leaseIDs, LeaseReason: leaseReason,
	}
}

// settlementOf reads pgadmit_settle's rows: one outcome per reservation, in
// the caller's order (sent[k] is the caller's index of the k-th one sent),
// and counts of the leases.
func settlementOf(rows []db.AdmissionSettleRow, sent []int) Settlement {
	out := Settlement{Reservations: make([]ReservationOutcome, len(sent))}
	for _, row := range rows {
		if row.IsLease {
			if row.Settled {
				out.LeasesReleased++
			} else {
				out.LeasesAlreadyReleased++
			}
			continue
		}
		o := ReservationOutcome{ID: idString(row.ID), Settled: row.Settled, Status: StatusUnknown,
			Metric: row.Metric, Reserved: row.ReservedAmount, Actual: row.ActualAmount}
		if row.Status != "" {
			o.Status = row.Status
		}
		if k := int(row.Ord) - 1; k >= 0 && k < len(sent) {
			out.Reservations[sent[k]] = o
		}
	}
	return out
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

// opName names Commit or Release by the status it settles to.
func opName(status string) string {
	if status == StatusCommitted {
		return "Commit"
	}
	return "Release"
}

func leaseIDStrings(leases []Lease) []string {
	ids := make([]string, len(leases))
	for i, lease := range leases {
		ids[i] = lease.ID
	}
	return ids
}
