package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// RenewLeases extends the given leases, the heartbeat of a long call: each
// live lease now expires its TTL past the database's clock, and the leases
// come back with their new ExpiresAt and the TTL they were renewed by.
// When some lease had already expired or been released, the others are
// still renewed (and returned) and the error matches ErrLeaseLost;
// errors.As gives a *LeaseLostError naming the lost ones. One round trip.
//
// The clock is read by the renewal (clock_timestamp(); in a caller's
// transaction, not the transaction's start). The database does not keep a
// lease's TTL: the one renewed by is the TTL of the Lease given here,
// which Reserve sets to the TTL the lease was taken with (DefaultLeaseTTL
// when the Limit's LeaseTTL was zero) and which a Grant keeps through
// JSON. Renew the Leases Reserve returned; a Lease built by hand with a
// zero TTL is renewed by DefaultLeaseTTL, and comes back with that TTL. A
// malformed id, a TTL that is not a whole number of seconds up to
// MaxLeaseTTL, or a lease listed twice (whatever the case of its id) is a
// *ValidationError, and nothing is sent.
func (l *Limiter) RenewLeases(ctx context.Context, leases []Lease) ([]Lease, error) {
	if err := l.callable(ctx); err != nil {
		return nil, err
	}
	texts := leaseIDStrings(leases)
	ids, err := parseIDs("Leases.ID", texts)
	if err != nil {
		return nil, err
	}
	// One lease twice, with two TTLs, would be renewed by either, and both
	// reported renewed by their own.
	if err := sameIDTwice("Leases", "lease", ids, texts, nil, leasesNamedOnce); err != nil {
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
		if err := inElement("Leases.TTL", i, validateSeconds("", ttl, MaxLeaseTTL)); err != nil {
			return nil, err // named as a malformed id is: Leases.TTL[i]
		}
		ttls[i] = int32(ttl / time.Second)
	}
	if err := l.enterLeases("RenewLeases", phaseLeaseScopes, phaseRows, ids); err != nil {
		return nil, err
	}
	// The scopes' advisory locks first, as admission takes them: a renewal
	// then cannot revive a lease that an admission has counted as expired.
	b := &pgx.Batch{}
	queue(b, func(r db.DBTX) { _ = l.queries.LeaseLockScopes(ctx, r, db.LeaseLockScopesParams{LeaseIds: ids}) })
	// Then the leases, in id order (the lease lock order, see idOrder): the
	// rows come back by id, whatever the order sent.
	order := idOrder(ids)
	var rows []db.LeaseRenewRow
	queueRows(b, &rows, func(r db.DBTX) {
		_, _ = l.queries.LeaseRenew(ctx, r, db.LeaseRenewParams{LeaseIds: permuted(ids, order), TtlSeconds: permuted(ttls, order), Now: l.opts.clock.at()})
	})
	if err := runBatch(ctx, l.conn, b); err != nil {
		return nil, wrapDBError(ctx, "renew leases", err)
	}
	expiry := make(map[string]time.Time, len(rows))
	for _, row := range rows {
		expiry[idString(row.ID)] = row.ExpiresAt
	}
	renewed := make([]Lease, 0, len(rows))
	var lost []string
	for i, lease := range leases {
		at, ok := expiry[idString(ids[i])] // canonical form: the caller's may be upper case
		if !ok {
			lost = append(lost, lease.ID)
			continue
		}
		lease.ExpiresAt = at
		lease.TTL = time.Duration(ttls[i]) * time.Second // DefaultLeaseTTL for a zero one
		renewed = append(renewed, lease)
	}
	if len(lost) > 0 {
		return renewed, &LeaseLostError{LeaseIDs: lost, Renewed: len(renewed)}
	}
	return renewed, nil
}

// ReleaseLeases ends leases early, without settling the grant's
// reservations, and returns how many it released; leases already released
// are skipped (idempotent). reason is recorded on each,
// and validated as Release's is. A malformed id, or a lease listed twice,
// is a *ValidationError, and nothing is sent. One round trip.
func (l *Limiter) ReleaseLeases(ctx context.Context, leases []Lease, reason string) (int, error) {
	if err := l.callable(ctx); err != nil {
		return 0, err
	}
	texts := leaseIDStrings(leases)
	ids, err := parseIDs("Leases.ID", texts)
	if err != nil {
		return 0, err
	}
	if err := sameIDTwice("Leases", "lease", ids, texts, nil, leasesNamedOnce); err != nil {
		return 0, err
	}
	if err := validateReason(reason); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := l.enterLeases("ReleaseLeases", phaseRows, phaseRows, ids); err != nil {
		return 0, err
	}
	p := releaseLeaseIDs(ids, reason)
	p.Now = l.opts.clock.at()
	rows, err := l.queries.AdmissionSettle(ctx, l.conn, p)
	if err != nil {
		return 0, wrapDBError(ctx, "release leases", err)
	}
	released := 0
	for _, row := range rows {
		if row.IsLease && row.Settled {
			released++
		}
	}
	return released, nil
}

// Attach links a grant's reservations and leases to the attempt that runs
// them, once the attempt row exists, and returns the grant with AttemptID
// set. A grant reserved without a task joins the attempt's task (TaskID
// set), so that finishing or recovering the task settles it. Nothing
// changes when the attempt names no row or is of another task than the
// grant (ErrUnknownTask: also when another Attach linked the grant to its
// own task first, so that of two racing calls only one succeeds), no
// longer runs (ErrTaskFinished), or a row of the grant no longer exists
// (ErrUnknownGrant); a grant with no row to link is of the task its TaskID
// names, if any. A malformed id, or a grant that names one reservation or
// lease twice (not one Reserve returned; a Local reservation too, by its
// LocalID), is a *ValidationError, and nothing is sent. One round trip.
//
// Attach and FinishTask of the same task exclude each other: an Attach
// that meets a FinishTask in flight waits for it and then finds the
// attempt no longer running (ErrTaskFinished); a FinishTask that meets an
// Attach in flight waits for it and settles what it linked.
//
// An Attach whose ctx ends before it returns gets ctx's error, and the
// grant may or may not be linked: its statements are one implicit
// transaction, linking all of the grant or none of it, which the server
// may have committed before it learned of the cancel. Calling again with
// the same attempt and grant is safe: rows already linked to the
// attempt's task count as its own (AttemptAttachGrant refuses only rows of
// another task), and linking them to the attempt again changes nothing,
// so the retry returns what the first call would have. Once the attempt no
// longer runs the retry gets ErrTaskFinished, linked or not: Release the
// grant then, which leaves what FinishTask or Recover already settled
// alone (Settled false). Inside a caller's transaction (WithTx), a
// cancelled statement ends the transaction, and the link is rolled back
// with it.
func (l *Limiter) Attach(ctx context.Context, attemptID string, grant Grant) (Grant, error) {
	if err := l.callable(ctx); err != nil {
		return grant, err
	}
	attempt, err := parseID("AttemptID", attemptID)
	if err != nil {
		return grant, err
	}
	var reservationIDs []string
	var at []int // their places in the grant, to name a bad one
	var local []int
	for i, r := range grant.Reservations {
		if r.Local { // a Local reservation has no row to link
			local = append(local, i)
		} else {
			reservationIDs = append(reservationIDs, r.ID)
			at = append(at, i)
		}
	}
	rids, err := parseIDsAt("Reservations.ID", reservationIDs, at)
	if err != nil {
		return grant, err
	}
	leaseTexts := leaseIDStrings(grant.Leases)
	lids, err := parseIDs("Leases.ID", leaseTexts)
	if err != nil {
		return grant, err
	}
	// A row named twice is not a grant Reserve returned; refused here, as
	// the statement would link it before its count told it apart.
	if err := grantRowsOnce(rids, reservationIDs, at, lids, leaseTexts); err != nil {
		return grant, err
	}
	if err := localsOnce(grant.Reservations, local); err != nil {
		return grant, err // as Commit and Release would refuse it
	}
	task, err := parseOptionalID("TaskID", grant.TaskID)
	if err != nil {
		return grant, err
	}
	// A grant with nothing to link (empty, or Local reservations only) still
	// goes to the database: the attempt must be checked (ErrUnknownTask,
	// ErrTaskFinished) and its task read (TaskID), as for any other grant.
	first := phaseCounters
	if len(rids) == 0 {
		first = phaseRows
	}
	if err := l.enterLeases("Attach", first, phaseRows, lids); err != nil {
		return grant, err
	}
	// Counters first (the lock order), as settling and recovery take them
	// before they touch the same reservations and leases.
	b := &pgx.Batch{}
	if len(rids) > 0 {
		queue(b, func(r db.DBTX) { _ = l.queries.CounterLockForReservations(ctx, r, rids) })
	}
	// The task row and the leases locked by a statement of their own, so
	// that the next one reads the attempt as FinishTask or recovery left
	// it, and the leases as another attach of the same grant left them.
	queue(b, func(r db.DBTX) {
		_ = l.queries.AttemptAttachLock(ctx, r, db.AttemptAttachLockParams{AttemptID: attempt, LeaseIds: lids})
	})
	var row db.AttemptAttachGrantRow
	queueRow(b, &row, func(r db.DBTX) {
		_, _ = l.queries.AttemptAttachGrant(ctx, r, db.AttemptAttachGrantParams{AttemptID: attempt, ReservationIds: rids, LeaseIds: lids})
	})
	if err := runBatch(ctx, l.conn, b); err != nil {
		return grant, wrapDBError(ctx, "attach", err)
	}
	if err := attachRefusal(row, attemptID, grant.TaskID); err != nil {
		return grant, err
	}
	if len(rids) == 0 && len(lids) == 0 && task.Valid && task != row.TaskID {
		// No row to refuse it: the grant's task is all that names it.
		return grant, errorf("ratelimit: attach: attempt %s is not of the grant's task %s: %w", attemptID, grant.TaskID, ErrUnknownTask)
	}
	// A row that no longer exists refuses the whole grant (nothing was
	// linked); a count short of the ids sent, which sameIDTwice leaves no
	// cause for, would still mean the grant is not the one Reserve returned.
	if row.MissingRows > 0 || int(row.Reservations) != len(rids) || int(row.Leases) != len(lids) {
		return grant, ErrUnknownGrant
	}
	grant.AttemptID = attemptID
	if grant.TaskID == "" {
		grant.TaskID = idString(row.TaskID)
	}
	return grant, nil
}

// sameIDTwice refuses a list of ids (ids, parsed from texts) that names
// one row twice, naming the second place by its position in the whole list
// (see parseIDsAt), as parseIDsAt names a bad one ("Reservations.ID[2]"),
// and saying why in: "a grant names each of its rows once".
func sameIDTwice(list, what string, ids []pgtype.UUID, texts []string, at []int, why string) error {
	twice := func(k, j int) error {
		return &ValidationError{Field: fmt.Sprintf("%s.ID[%d]", list, place(at, k)), Value: shown(texts[k]),
			Reason: fmt.Sprintf("same %s as %s.ID[%d]: %s", what, list, place(at, j), why)}
	}
	if len(ids) <= smallIDList {
		// A grant of one Reserve, as nearly every Commit is: compared
		// pairwise, with no map to allocate on the settle path.
		for k := 1; k < len(ids); k++ {
			for j := range k {
				if ids[j].Bytes == ids[k].Bytes {
					return twice(k, j)
				}
			}
		}
		return nil
	}
	seen := make(map[[16]byte]int, len(ids))
	for k, id := range ids {
		if j, dup := seen[id.Bytes]; dup {
			return twice(k, j)
		}
		seen[id.Bytes] = k
	}
	return nil
}

// grantRowsOnce refuses a grant (its reservations' ids, parsed from
// rtexts, at their places at, and its leases' ids, parsed from ltexts)
// that names one row twice: not a grant Reserve returned.
func grantRowsOnce(rids []pgtype.UUID, rtexts []string, at []int, lids []pgtype.UUID, ltexts []string) error {
	if err := sameIDTwice("Reservations", "reservation", rids, rtexts, at, grantNamesOnce); err != nil {
		return err
	}
	return sameIDTwice("Leases", "lease", lids, ltexts, nil, grantNamesOnce)
}

// smallIDList is the longest list sameIDTwice compares pairwise.
const smallIDList = 16

// grantNamesOnce is why a grant that names a row twice is refused.
const grantNamesOnce = "a grant names each of its rows once"

// leasesNamedOnce is why RenewLeases and ReleaseLeases refuse a lease
// listed twice: renewed by either of its TTLs, it could be reported
// renewed by the other.
const leasesNamedOnce = "a call names each lease once"

// attachRefusal says why AttemptAttachGrant changed nothing, as Reserve's
// task guard would: an attempt that names no row, one that no longer runs,
// or one of another task than the grant's rows.
func attachRefusal(row db.AttemptAttachGrantRow, attemptID, taskID string) error {
	switch {
	case row.AttemptStatus == "":
		return errorf("ratelimit: attach: attempt %s: %w", attemptID, ErrUnknownTask)
	case row.AttemptStatus != "running":
		return errorf("ratelimit: attach: attempt %s: %w", attemptID, ErrTaskFinished)
	case row.OtherTaskRows > 0:
		return errorf("ratelimit: attach: attempt %s is not of the grant's task %s: %w", attemptID, taskID, ErrUnknownTask)
	}
	return nil
}

// leaseIDStrings returns the leases' ids, in order.
func leaseIDStrings(leases []Lease) []string {
	ids := make([]string, len(leases))
	for i, lease := range leases {
		ids[i] = lease.ID
	}
	return ids
}
