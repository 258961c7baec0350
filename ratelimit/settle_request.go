package ratelimit

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// settleRequest is one grant's settlement, validated: what Commit or
// Release sends.
type settleRequest struct {
	reservations []Reservation // as the grant says; their counters may be unknown
	ids          []pgtype.UUID
	amounts      []float64
	status       string
	reason       string
	leaseIDs     []pgtype.UUID
	// Where the request landed in a settleCall: its reservations were sent
	// in the order sent (indexes into reservations) from rFirst on, its
	// leases from lFirst on.
	sent           []int
	rFirst, lFirst int
}

// reservationReason is the reason its reservations record: a commit's
// reservations record reasonSuccess, its leases reasonCommitted.
func (r *settleRequest) reservationReason() string {
	if r.status == StatusCommitted {
		return reasonSuccess
	}
	return r.reason
}

// rows is how many rows r gives pgadmit_settle: its reservations and
// leases.
func (r *settleRequest) rows() int { return len(r.ids) + len(r.leaseIDs) }

// newSettleRequest checks what settling sends of grant, the part of a
// grant that the database settles: a field it refuses is named by its
// reservation's place in the whole grant, at (nil: grant is whole).
func newSettleRequest(grant Grant, status, reason string, amounts []float64, at []int) (settleRequest, error) {
	reservationIDs := make([]string, len(grant.Reservations))
	for k, r := range grant.Reservations {
		if err := inElement("Reservations", place(at, k), r.checkCounterNames()); err != nil {
			return settleRequest{}, err
		}
		reservationIDs[k] = r.ID
	}
	ids, err := parseIDsAt("Reservations.ID", reservationIDs, at)
	if err != nil {
		return settleRequest{}, err
	}
	leaseTexts := leaseIDStrings(grant.Leases)
	leaseIDs, err := parseIDs("Leases.ID", leaseTexts)
	if err != nil {
		return settleRequest{}, err
	}
	// A row named twice is settled once, at either place's amount, and
	// the other place reported as not settled by this call.
	if err := grantRowsOnce(ids, reservationIDs, at, leaseIDs, leaseTexts); err != nil {
		return settleRequest{}, err
	}
	return settleRequest{reservations: grant.Reservations, ids: ids, amounts: amounts, status: status, reason: reason, leaseIDs: leaseIDs}, nil
}

// checkCounterNames refuses counter names that settling could not send:
// they go to the server as the grant has them (knowsCounters), where text
// that is not valid UTF-8 or holds a NUL byte fails the statement with a
// raw "invalid byte sequence", and one longer than MaxScopeBytes names no
// counter Reserve made; so does a WindowStart out of timestamptz's range
// ("timestamp out of range"). "" and a zero WindowStart are fine: the
// counter is then read from the reservation's row.
func (r Reservation) checkCounterNames() error {
	for _, f := range [...]struct{ field, value string }{{"ScopeType", r.ScopeType}, {"ScopeKey", r.ScopeKey}, {"Metric", r.Metric}} {
		if err := validateOptionalText(f.field, f.value, MaxScopeBytes); err != nil {
			return err
		}
	}
	return validateTimestamp("WindowStart", r.WindowStart)
}

func (r *settleRequest) empty() bool { return len(r.ids) == 0 && len(r.leaseIDs) == 0 }

// knowsCounters reports whether the grant names every reservation's
// counter, as a grant from Reserve does (not one rebuilt from ids alone).
func (r *settleRequest) knowsCounters() bool {
	for _, res := range r.reservations {
		if res.ScopeType == "" || res.ScopeKey == "" || res.Metric == "" || res.WindowStart.IsZero() ||
			res.Window <= 0 || res.Window%time.Second != 0 || res.Window > MaxWindow {
			return false
		}
	}
	return len(r.reservations) == len(r.ids)
}

// outcome reads the request's share of a settleCall's rows.
func (r *settleRequest) outcome(d settleRows) Settlement {
	out := Settlement{Reservations: make([]ReservationOutcome, len(r.ids))}
	for k, i := range r.sent {
		row := d.reservations[r.rFirst+k]
		// Named as the grant names it: its id as spelled there, and its
		// metric where no row has one to give (StatusUnknown).
		o := ReservationOutcome{ID: r.reservations[i].ID, Settled: row.Settled, Status: StatusUnknown,
			Metric: row.Metric, Reserved: row.ReservedAmount, Actual: row.ActualAmount}
		if row.Status != "" {
			o.Status = row.Status
		}
		if o.Metric == "" {
			o.Metric = r.reservations[i].Metric
		}
		out.Reservations[i] = o
	}
	for k := range r.leaseIDs {
		if d.leases[r.lFirst+k].Settled {
			out.LeasesReleased++
		} else {
			out.LeasesAlreadyReleased++
		}
	}
	return out
}
