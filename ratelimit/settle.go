package ratelimit

import (
	"context"
	"errors"
)

// Reservation statuses.
const (
	StatusReserved  = "reserved"
	StatusCommitted = "committed"
	StatusReleased  = "released"
	// StatusUnknown is what Commit and Release report for a reservation they
	// cannot find: no row has its id, or, for a Local one, no block of this
	// Limiter holds it.
	//
	// A reservation id names no row when it was pruned long ago, or never
	// written. A Local reservation is not found for a copy of a grant
	// (decoded from JSON) settled on another Limiter than the one that
	// admitted it, or after its block was returned, or without a LocalID
	// (encoded before there was one). Its block charges the estimate when
	// it is returned, unless it was settled (a copy of an admission already
	// settled, once its block admits no more).
	//
	// It is reported too for a Local reservation, the grant's own or a
	// copy's, whose block Close could not return (the database
	// unreachable): Maintenance.Recover returns that block once its window
	// is over, charging its holder's last report.
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
	// ID is the reservation's, as the grant spells it ("" for a Local
	// one). Metric is its row's, or the grant's when no row has its id
	// (StatusUnknown) or for a Local one.
	ID     string
	Metric string
	// Status is the reservation's status after the call.
	Status string
	// Settled is true when this call committed or released it; false when it
	// was already finished (the call was a no-op for it), or left open
	// (Status StatusReserved) because the grant names another counter than
	// the reservation draws on.
	Settled bool
	// Reserved is the estimate it held, as this call found it, whatever
	// the grant now says: its row's; 0 when no row has its id
	// (StatusUnknown: the database knows of nothing it held); for a Local
	// one, its admission's, or the grant's Amount when this Limiter cannot
	// find it (StatusUnknown: its block charges that estimate when it is
	// returned, unless the Limiter that admitted it settles it).
	Reserved float64
	// Actual is the committed amount (committed reservations only).
	Actual float64
}

// Overage is how much the actual amount exceeded the reserved estimate.
func (o ReservationOutcome) Overage() float64 { return max(o.Actual-o.Reserved, 0) }

// AlreadySettled reports a no-op: nothing in the grant was still open. A
// reservation that stays open (Status StatusReserved: the grant names
// another counter than the one it draws on, as an altered grant may) is
// not settled, and no no-op either.
func (s Settlement) AlreadySettled() bool {
	if s.LeasesReleased > 0 {
		return false
	}
	for _, r := range s.Reservations {
		if r.Settled || r.Status == StatusReserved {
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

// Commit settles a grant with the amounts really used and ends its
// leases: the request is over. Release instead gives a grant back unused.
//
// Each reservation is charged actual[metric], or its estimate (its Amount)
// when actual has no entry for its metric; an entry of 0 charges 0. Its
// window's counter drops the estimate from reserved and adds that amount
// to used (a Local reservation's, when its block is returned); an actual above the estimate is recorded in full and reported in
// Settlement.Overages. Every reservation of one metric (a key's tokens and
// its team's, say) is charged the same entry; an entry for a metric the
// grant reserved nothing of is validated, then ignored. A committed
// reservation records the reason "success", its leases "committed".
//
// Idempotent: reservations already committed or released are left alone
// and reported with Settled false, so a call may be repeated (Release says
// what a ctx that ends leaves).
//
// Bad input is a *ValidationError, and nothing is written: an actual
// amount, or an estimate charged in its place, that is not a valid amount
// (ValidateAmount); a reservation whose ScopeType, ScopeKey or Metric is
// not valid UTF-8, holds a NUL byte or is longer than MaxScopeBytes, or
// whose WindowStart PostgreSQL cannot hold (Commit and Release send them
// as the grant has them); a grant that names one reservation or lease
// twice (not one Reserve returned), a Local one too (by its LocalID,
// whatever its spelling).
//
// One round trip (none for a grant of Local reservations alone, which
// settle in memory): a grant of more than 256 reservations (joined from
// many Reserves) is settled in calls of 256 sent together, in one
// transaction.
func (l *Limiter) Commit(ctx context.Context, grant Grant, actual map[string]float64) (Settlement, error) {
	if err := l.callable(ctx); err != nil {
		return Settlement{}, err
	}
	for _, v := range actual {
		if validateAmount("", v) != nil {
			return Settlement{}, badActual(actual)
		}
	}
	amounts := make([]float64, len(grant.Reservations))
	for i, r := range grant.Reservations {
		amounts[i] = r.Amount
		if v, ok := actual[r.Metric]; ok {
			amounts[i] = v
		} else if err := validateAmount("Amount", r.Amount); err != nil {
			// The estimate is charged as the actual amount, and the grant
			// is the caller's to keep (and alter): NaN or +Inf would poison
			// the window's counter, a negative one fail on a CHECK.
			return Settlement{}, inElement("Reservations", i, err)
		}
	}
	return l.settle(ctx, grant, StatusCommitted, reasonCommitted, amounts)
}

// badActual is the *ValidationError of Commit's actual amounts, which
// hold at least one that is not a valid amount: it names the least metric
// (in byte order) of those, so that the same call always names the same
// one (a map's order is random), shown quoted and cut short as any text a
// *ValidationError refused (shown), since the caller may have taken the
// metric from a request. Only a refused call gets here: the loop that
// finds a bad amount sorts nothing.
func badActual(actual map[string]float64) error {
	var first string
	var firstErr error
	for metric, v := range actual {
		if err := validateAmount("", v); err != nil && (firstErr == nil || metric < first) {
			first, firstErr = metric, err
		}
	}
	return within("actual["+shown(first)+"]", firstErr)
}

const (
	// reasonCommitted is recorded on the leases a Commit ends, and
	// reasonSuccess on the reservations it commits: the reason the
	// reference store records on them, which a DBA's query of the ledger
	// by reason may look for.
	reasonCommitted = "committed"
	reasonSuccess   = "success"
)

// Release gives a grant back unused: its reservations are released (their
// windows no longer count them) and its leases end. Commit instead charges
// what was used.
//
// reason is recorded on each reservation and lease: at most
// MaxReasonBytes of valid UTF-8 without NUL bytes, or a *ValidationError,
// and nothing is written. A grant Commit refuses as bad input Release
// refuses too, but for its estimates, which Release does not charge.
// Idempotent like Commit. One round trip, as for Commit.
//
// A Commit or Release whose ctx ends before it returns gets ctx's error,
// and the grant may or may not be settled: a combined statement once sent
// runs to its answer, as Reserve's does, and one sent alone may have been
// committed by the server before it learned of the cancel. Calling again
// with the same grant settles what is still open and reports the rest with
// Settled false (the statuses a retry reads are those the first call
// left).
func (l *Limiter) Release(ctx context.Context, grant Grant, reason string) (Settlement, error) {
	if err := l.callable(ctx); err != nil {
		return Settlement{}, err
	}
	if err := validateReason(reason); err != nil {
		return Settlement{}, err
	}
	return l.settle(ctx, grant, StatusReleased, reason, make([]float64, len(grant.Reservations)))
}

func (l *Limiter) settle(ctx context.Context, grant Grant, status, reason string, amounts []float64) (Settlement, error) {
	local, remote := splitLocal(grant, amounts)
	if err := localsOnce(grant.Reservations, local); err != nil {
		return Settlement{}, err // before anything is settled, here or in the database
	}
	out, err := l.settleRemote(ctx, remote, status, reason)
	if len(local) == 0 || errors.Is(err, ErrInvalidInput) {
		return out, err
	}
	// Local reservations settle in this process's memory (their blocks
	// charge what was used when they are returned), even when the
	// database's part failed: a caller that does not try again would
	// otherwise leave them in flight, holding their blocks until their
	// window is long over. Trying again settles the rest.
	outcomes := make([]ReservationOutcome, len(grant.Reservations))
	for _, i := range local {
		r := grant.Reservations[i]
		la := r.local
		if la == nil {
			// A copy of the grant (decoded from JSON) lost the handle;
			// this Limiter finds it by its LocalID if it admitted it
			// (a WithTx copy of it too, as the handle settles there).
			la = l.admitted.admission(r)
		}
		if la == nil {
			// Admitted by another Limiter, or its block is returned: only
			// that Limiter knows its fate, and its block charges the
			// estimate when returned.
			outcomes[i] = ReservationOutcome{Metric: r.Metric, Status: StatusUnknown, Reserved: r.Amount}
			continue
		}
		st, charged, settled := la.settle(status == StatusCommitted, amounts[i])
		// Reserved is what the admission holds, as a row's is the row's:
		// the grant's Amount is the caller's to alter.
		o := ReservationOutcome{Metric: r.Metric, Settled: settled, Status: st, Reserved: la.amount.Approx()}
		if st == StatusCommitted {
			o.Actual = charged
		}
		outcomes[i] = o
	}
	if err != nil {
		return out, err
	}
	for k, i := range remote.positions {
		outcomes[i] = out.Reservations[k]
	}
	out.Reservations = outcomes
	return out, nil
}

// remoteShare is the part of a grant that the database settles.
type remoteShare struct {
	grant     Grant
	amounts   []float64
	positions []int // each remote reservation's index in the whole grant
}

// splitLocal separates a grant's local reservations (their indexes) from
// what the database settles. A Local reservation has no row, whether or not
// this grant still holds its handle (one decoded from JSON does not).
func splitLocal(grant Grant, amounts []float64) (local []int, remote remoteShare) {
	remote.grant = grant
	remote.amounts = amounts
	for i, r := range grant.Reservations {
		if r.Local {
			local = append(local, i)
		}
	}
	if len(local) == 0 {
		remote.positions = make([]int, len(grant.Reservations))
		for i := range remote.positions {
			remote.positions[i] = i
		}
		return nil, remote
	}
	remote.grant.Reservations, remote.amounts = nil, nil
	for i, r := range grant.Reservations {
		if !r.Local {
			remote.grant.Reservations = append(remote.grant.Reservations, r)
			remote.amounts = append(remote.amounts, amounts[i])
			remote.positions = append(remote.positions, i)
		}
	}
	return local, remote
}

func (l *Limiter) settleRemote(ctx context.Context, remote remoteShare, status, reason string) (Settlement, error) {
	req, err := newSettleRequest(remote.grant, status, reason, remote.amounts, remote.positions)
	if err != nil {
		return Settlement{}, err
	}
	if req.empty() {
		return Settlement{}, nil
	}
	if len(req.ids) > settleChunk {
		if err := l.enterLeases(opName(status), phaseCounters, phaseRows, req.leaseIDs); err != nil {
			return Settlement{}, err
		}
		return l.settleLong(ctx, &req)
	}
	if l.settles != nil {
		return l.settles.do(ctx, &req)
	}
	first := phaseCounters
	if len(req.ids) == 0 {
		first = phaseRows
	}
	if err := l.enterLeases(opName(status), first, phaseRows, req.leaseIDs); err != nil {
		return Settlement{}, err
	}
	out, _, err := l.settleBatch(ctx, []*settleRequest{&req})
	if err != nil {
		return Settlement{}, err
	}
	return out[0], nil
}

// opName names Commit or Release by the status it settles to.
func opName(status string) string {
	if status == StatusCommitted {
		return "Commit"
	}
	return "Release"
}
