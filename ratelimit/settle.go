package ratelimit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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
// ended. reason is recorded on each. Idempotent like Commit. One round trip.
func (l *Limiter) Release(ctx context.Context, grant Grant, reason string) (Settlement, error) {
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

	b := &pgx.Batch{}
	var settled []db.ReservationSettleRow
	if len(ids) > 0 {
		l.queueSettle(ctx, b, ids, amounts, status, reason, &settled)
	}
	var released []db.LeaseReleaseRow
	if len(leaseIDs) > 0 {
		queueRows(b, &released, func(r db.DBTX) {
			_, _ = l.queries.LeaseRelease(ctx, r, db.LeaseReleaseParams{Reason: reason, LeaseIds: leaseIDs})
		})
	}
	if err := runBatch(ctx, l.conn, b); err != nil {
		return Settlement{}, wrapDBError(status, err)
	}

	out := Settlement{
		LeasesReleased:        len(released),
		LeasesAlreadyReleased: len(leaseIDs) - len(released),
	}
	for _, row := range settled {
		o := ReservationOutcome{ID: idString(row.ID), Settled: row.Settled, Status: StatusUnknown}
		if row.Status != "" {
			o.Status = row.Status
		}
		if row.Metric.Valid {
			o.Metric = row.Metric.String
		}
		if row.ReservedAmount != nil {
			o.Reserved = *row.ReservedAmount
		}
		if row.ActualAmount != nil {
			o.Actual = *row.ActualAmount
		}
		out.Reservations = append(out.Reservations, o)
	}
	return out, nil
}

// queueSettle queues the settling of open reservations: their counters
// locked first (the lock order), then the reservations committed with the
// given actual amounts or released, and their counters moved, with reason.
func (l *Limiter) queueSettle(ctx context.Context, b *pgx.Batch, ids []pgtype.UUID, amounts []float64, status, reason string, out *[]db.ReservationSettleRow) {
	queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, ids) })
	queueRows(b, out, func(r db.DBTX) {
		_, _ = l.queries.ReservationSettle(ctx, r, db.ReservationSettleParams{
			ReservationIds: ids, ActualAmounts: amounts, Status: status,
			Reason: pgtype.Text{String: reason, Valid: reason != ""},
		})
	})
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
