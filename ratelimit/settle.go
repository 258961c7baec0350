package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
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
	// ID and Metric are the reservation's, as the grant has them (ID ""
	// for a Local one).
	ID     string
	Metric string
	// Status is the reservation's status after the call.
	Status string
	// Settled is true when this call committed or released it; false when it
	// was already finished (the call was a no-op for it), or left open
	// (Status StatusReserved) because the grant names another counter than
	// the reservation draws on.
	Settled bool
	// Reserved is the amount it held: its estimate.
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
		o := ReservationOutcome{Metric: r.Metric, Settled: settled, Status: st, Reserved: r.Amount}
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
		o := ReservationOutcome{ID: idString(r.ids[i]), Settled: row.Settled, Status: StatusUnknown,
			Metric: row.Metric, Reserved: row.ReservedAmount, Actual: row.ActualAmount}
		if row.Status != "" {
			o.Status = row.Status
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

// counter names the counter the reservation draws on (its window start
// apart).
func (r Reservation) counter() counterKey {
	return counterKey{r.ScopeType, r.ScopeKey, r.Metric, int32(r.Window / time.Second)}
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
