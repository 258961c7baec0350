package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/internal/decimal"
)

// blockSet is one counter's blocks in this process.
type blockSet struct {
	a   *allotments
	key counterKey

	mu       sync.Mutex
	cur      *block   // admitting
	next     *block   // taken ahead, admitting once cur is spent
	draining []*block // closed to new admissions; returned once nothing is in flight
	refill   chan struct{}
	// Units admitted since rateSince, and the rate measured at the last
	// refill (units per second), which sizes the next block.
	units     float64
	rateSince time.Time
	rate      float64
	// lastRefillGranted: the last block taken from the database was granted.
	lastRefillGranted bool
	// limit is the limit of the latest block asked for (set before any
	// block is): the housekeeping's trims write it to the counter's
	// limit_value, as the take wrote it, rather than the limit the trimmed
	// block was taken under, which set a lowered limit back.
	limit float64
	// Until pauseUntil no block is asked for a request of pauseNeed or
	// more: a block asked for with room for pauseNeed found none in its
	// window (see noRoomBackoff), or the request failed (pauseNeed 0: see
	// failedBlockPause). It is on this host's monotonic clock, a pause being
	// a time from when it began: on the estimate of the database's clock, a
	// step back of that clock (read by a sync) lengthened it by the step.
	pauseUntil time.Time
	pauseNeed  float64
	// lastTake is when a request last came for a block of this counter, on
	// this host's clock (idleness is a time in this process; see IdleAfter);
	// dropped says the set left allotments.sets (dropIdle): a request that
	// finds it so gets the counter's new set instead.
	lastTake time.Time
	dropped  bool
}

// block is one allotment: units of one window held for this process.
type block struct {
	id          pgtype.UUID
	windowStart time.Time
	resetAt     time.Time
	limit       float64 // of its counter, when taken
	// Its units, the estimates of the admissions in flight and the actual
	// amounts of those settled, exactly as the database counts them (see
	// units): a float64 sum admitted past granted.
	granted   units // in the database: what it was granted, or trimmed to
	reserved  units
	used      units
	inflight  int // admissions in flight
	lastUse   time.Time
	closed    bool   // admits nothing more
	reason    string // why it closed
	gone      bool   // returned: later settlements change nothing in the database
	abandoned bool   // Close could not return it: left to Recover (abandonUnreturned)
	// endsLocal is resetAt on this host's monotonic clock, as the estimate
	// of the database's clock put it when the block was taken: a step back
	// of that clock puts off the window's end on it, not on this one.
	endsLocal time.Time
	// admissions are those admitted from the block by sequence, for
	// settling a copy of a grant that names one by its LocalID; dropped
	// when the block is returned. Once the block is closed it keeps only
	// those in flight (forgetSettledLocked): it may wait for one until its
	// window is over, and would keep every settled one meanwhile.
	admissions map[uint64]*localAdmission
}

// spent is what b admitted: the settled admissions' actual amounts and the
// estimates of those in flight.
func (b *block) spent() units { return b.used.Plus(b.reserved) }

// free is what b has left to admit.
func (b *block) free() units { return b.granted.Minus(b.spent()) }

// trimmedTo records a trim to what b admitted, to: its requests in flight
// that settle below their estimate, or are released, then free units that
// the next trim gives back. A closed block's unused units are the
// window's, which others may be refused for meanwhile: trimmed only once,
// a block waiting for its slowest request held all the units its others
// had not used until then (TestLocalStrandingAcrossLimitersStaysWithinTheBound).
func (b *block) trimmedTo(to units) {
	if to.Cmp(b.granted) < 0 {
		b.granted = to
	}
}

// localAdmission is one request admitted from a block.
type localAdmission struct {
	set    *blockSet
	b      *block
	seq    uint64 // its LocalID's sequence
	tag    uint64 // and random tag (see localID)
	amount units
	// Guarded by set.mu: whether it was settled, how, and what was charged.
	settled bool
	status  string
	charged float64
}

// take admits w from a block of this counter, or returns nil (decide it in
// the database). With no room, it waits for the block another request is
// taking, or takes one itself, and tries again. dropped reports that the
// set was dropped before it could (dropIdle): take nothing from it.
func (s *blockSet) take(ctx context.Context, w windowLimit) (la *localAdmission, dropped bool) {
	amount := w.Limit.Amount
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return nil, true
	}
	s.lastTake = time.Now()
	for waits := 0; ; waits++ {
		now := s.a.dbNow()
		if la := s.tryLocked(now, amount, w.Limit.Limit); la != nil {
			s.prefetchLocked(w, now)
			return la, false
		}
		if waits == maxRefillWaits {
			return nil, false
		}
		if s.refill == nil {
			if s.a.windowEnding(w.windowSeconds) {
				return nil, false // the window's last moments are decided in the database
			}
			if s.pausedLocked(amount) {
				return nil, false // a full window, or a failing block request: decided in the database
			}
			if !s.refillLocked(w, amount, true) {
				return nil, false // closed
			}
		}
		ch := s.refill
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if ctx.Err() != nil || !s.lastRefillGranted || s.dropped {
			return nil, false
		}
	}
}

// maxRefillWaits bounds how many blocks a request waits for before it is
// decided in the database: one another request was taking, its own, and one
// more should a request of another size have spent the last.
const maxRefillWaits = 3

// tryLocked admits amount from the current block, moving on to the next
// one when the current one is spent: out of units, or of admissions (it
// keeps each until it is returned, see maxBlockAdmissions). A block taken under a higher limit
// than the request's (a limit lowered while it was open, say) has no room
// for it either: its units fit under that limit when it was granted, not
// under this one, which the database would decide the request against. A
// block taken under a lower limit fits under a higher one.
func (s *blockSet) tryLocked(now time.Time, amount, limit float64) *localAdmission {
	s.retireLocked(now)
	for {
		b := s.cur
		if b == nil {
			if s.next == nil {
				return nil
			}
			s.cur, s.next = s.next, nil
			continue
		}
		if u := decimal.Of(amount); s.hasRoom(b, u, limit) {
			b.reserved = b.reserved.Plus(u)
			b.inflight++
			b.lastUse = time.Now()
			s.units += amount
			la := &localAdmission{set: s, b: b, seq: s.a.seq.Add(1), tag: randomTag(), amount: u}
			if b.admissions == nil {
				b.admissions = map[uint64]*localAdmission{}
			}
			b.admissions[la.seq] = la
			return la
		}
		if s.next == nil {
			return nil
		}
		s.closeLocked(b, reasonTrimmed) // spent: what is left is less than this request, or is of a higher limit
		s.cur, s.next = s.next, nil
	}
}

// hasRoom reports whether b can admit amount under limit (see tryLocked).
func (s *blockSet) hasRoom(b *block, amount units, limit float64) bool {
	return b.limit <= limit && b.free().Cmp(amount) >= 0 && len(b.admissions) < s.a.maxAdmissions
}

// retireLocked closes the blocks that may no longer admit: their window
// is about to end or, the database's clock having stepped back, has not
// begun (see admits). Both go back as window_ended (the window is not the
// database's current one), charging what they admitted once nothing
// admitted from them is in flight; a block of a window not begun is not
// kept for later, the current window's blocks take its place.
func (s *blockSet) retireLocked(now time.Time) {
	for _, b := range []*block{s.cur, s.next} {
		if b != nil && !s.a.admits(now, b) {
			s.closeLocked(b, reasonWindowEnded)
		}
	}
	s.dropClosedLocked()
}

// dropClosedLocked lets go of the current and next block once closed.
func (s *blockSet) dropClosedLocked() {
	if s.cur != nil && s.cur.closed {
		s.cur = nil
	}
	if s.next != nil && s.next.closed {
		s.next = nil
	}
}

// closeLocked stops admitting from b; it is returned once nothing admitted
// from it is in flight.
func (s *blockSet) closeLocked(b *block, reason string) {
	if b.closed {
		return
	}
	b.closed, b.reason = true, reason
	b.forgetSettledLocked()
	s.draining = append(s.draining, b)
}

// forgetSettledLocked lets go of the settled admissions of a closed block:
// a copy of one of their grants then reports StatusUnknown, as after the
// block is returned. Those in flight are kept, to be settled by a copy.
func (b *block) forgetSettledLocked() {
	for seq, la := range b.admissions {
		if la.settled {
			delete(b.admissions, seq)
		}
	}
}

// settle ends one local admission: committed with actual (its block's
// used grows by it, which may exceed the block: the overage is charged
// when the block is returned) or released. It returns the admission's
// status and the amount charged for it, and whether this call settled it:
// false when it was settled before (the first settlement stands, as a
// reservation row's does), and when its block was returned while it was in
// flight (charged at its estimate: what this call says changes nothing).
// Its status is StatusUnknown once Close left its block to Recover, which
// charges the block's last report, whatever this call or an earlier one said.
func (la *localAdmission) settle(commit bool, actual float64) (status string, charged float64, settled bool) {
	s := la.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if la.b.abandoned {
		return StatusUnknown, 0, false
	}
	if la.settled {
		return la.status, la.charged, false
	}
	la.settled = true
	if la.b.closed {
		delete(la.b.admissions, la.seq) // see forgetSettledLocked
	}
	la.b.reserved = la.b.reserved.Minus(la.amount)
	la.b.inflight--
	switch {
	case la.b.gone:
		// Charged at its estimate by the return, or by the next one if
		// this return fails and the block is requeued (used counts it).
		la.b.used = la.b.used.Plus(la.amount)
		la.status, la.charged = StatusCommitted, la.amount.Approx()
		return la.status, la.charged, false
	case commit:
		la.b.used = la.b.used.Plus(decimal.Of(actual))
		la.status, la.charged = StatusCommitted, actual
	default:
		la.status = StatusReleased
	}
	return la.status, la.charged, true
}

// canTake reports whether take would admit w from a block this process
// already holds, without admitting it: Check's view of a Local limit. It
// takes no block and changes nothing. False when the limit would be decided
// in the database, or would wait for a block to be taken (which the
// database grants only from what its window has free, as it would decide
// the limit itself).
func (a *allotments) canTake(w windowLimit) bool {
	l := w.Limit
	if !a.fitsBlock(w) {
		return false
	}
	a.mu.Lock()
	s := a.sets[w.counter()]
	closed := a.closed
	a.mu.Unlock()
	if s == nil || closed {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return false
	}
	now := a.dbNow()
	for _, b := range []*block{s.cur, s.next} { // tryLocked moves on to next when cur has no room
		if b != nil && !b.closed && a.admits(now, b) && s.hasRoom(b, decimal.Of(l.Amount), l.Limit) {
			return true
		}
	}
	return false
}
