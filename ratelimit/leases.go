package ratelimit

import (
	"context"
	"time"

	"github.com/pgadmit/pgadmit/db"
)

// RenewLeases extends each live lease to now() + its TTL (a heartbeat for a
// long call) and returns the leases with their new expiry. When some lease
// had already expired or been released, the others are still renewed and
// the error matches ErrLeaseLost; errors.As gives a *LeaseLostError naming
// the lost ones. One round trip.
func (l *Limiter) RenewLeases(ctx context.Context, leases []Lease) ([]Lease, error) {
	ids, err := parseIDs("Leases.ID", leaseIDStrings(leases))
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	ttls := make([]int32, len(leases))
	for i, lease := range leases {
		ttl := lease.TTL
		if ttl == 0 {
			ttl = DefaultLeaseTTL
		}
		if err := validateSeconds("Leases.TTL", ttl, MaxLeaseTTL); err != nil {
			return nil, err
		}
		ttls[i] = int32(ttl / time.Second)
	}
	rows, err := l.queries.LeaseRenew(ctx, l.conn, db.LeaseRenewParams{LeaseIds: ids, TtlSeconds: ttls})
	if err != nil {
		return nil, wrapDBError("renew leases", err)
	}
	expiry := make(map[string]time.Time, len(rows))
	for _, row := range rows {
		expiry[idString(row.ID)] = row.ExpiresAt
	}
	renewed := make([]Lease, 0, len(rows))
	var lost []string
	for _, lease := range leases {
		at, ok := expiry[lease.ID]
		if !ok {
			lost = append(lost, lease.ID)
			continue
		}
		lease.ExpiresAt = at
		renewed = append(renewed, lease)
	}
	if len(lost) > 0 {
		return renewed, &LeaseLostError{LeaseIDs: lost, Renewed: len(renewed)}
	}
	return renewed, nil
}

// ReleaseLeases ends leases early and returns how many it released; leases
// already released are skipped (idempotent). One round trip.
func (l *Limiter) ReleaseLeases(ctx context.Context, leases []Lease, reason string) (int, error) {
	ids, err := parseIDs("Leases.ID", leaseIDStrings(leases))
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := l.queries.LeaseRelease(ctx, l.conn, db.LeaseReleaseParams{Reason: reason, LeaseIds: ids})
	if err != nil {
		return 0, wrapDBError("release leases", err)
	}
	return len(rows), nil
}

// Attach links a grant's reservations and leases to the attempt that runs
// them, once the attempt row exists, and returns the grant with AttemptID
// set. One round trip.
func (l *Limiter) Attach(ctx context.Context, attemptID string, grant Grant) (Grant, error) {
	attempt, err := parseID("AttemptID", attemptID)
	if err != nil {
		return grant, err
	}
	reservationIDs := make([]string, len(grant.Reservations))
	for i, r := range grant.Reservations {
		reservationIDs[i] = r.ID
	}
	rids, err := parseIDs("Reservations.ID", reservationIDs)
	if err != nil {
		return grant, err
	}
	lids, err := parseIDs("Leases.ID", leaseIDStrings(grant.Leases))
	if err != nil {
		return grant, err
	}
	if len(rids) == 0 && len(lids) == 0 {
		grant.AttemptID = attemptID
		return grant, nil
	}
	row, err := l.queries.AttemptAttachGrant(ctx, l.conn, db.AttemptAttachGrantParams{AttemptID: attempt, ReservationIds: rids, LeaseIds: lids})
	if err != nil {
		return grant, wrapDBError("attach", err)
	}
	if int(row.Reservations) != len(rids) || int(row.Leases) != len(lids) {
		return grant, ErrUnknownGrant
	}
	grant.AttemptID = attemptID
	return grant, nil
}
