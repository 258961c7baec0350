package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
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

// installLocked makes a new block current, or next when the current one
// still admits.
func (s *blockSet) installLocked(b *block) {
	switch {
	case s.cur == nil:
		s.cur = b
	case s.next == nil:
		s.next = b
	default:
		s.closeLocked(b, reasonIdle) // cannot happen: one refill at a time
	}
}

// prefetchLocked takes the next block ahead, off the request's path, when
// the current one is more than half spent, unless the current one would
// last until its window stops admitting (Margin before its end) at the
// rate this process admits: the next block would admit nothing, and hold
// its units from the others until it went back. The same statement trims a
// block set aside since (see refillLocked). now is the estimate of the
// database's clock.
func (s *blockSet) prefetchLocked(w windowLimit, now time.Time) {
	b := s.cur
	if b == nil || s.next != nil || s.refill != nil || b.free().Approx() > b.granted.Approx()/2 || s.outlastsWindowLocked(b, now) || s.pausedLocked(w.Limit.Amount) {
		return
	}
	s.refillLocked(w, w.Limit.Amount, false)
}

// outlastsWindowLocked reports whether b still has units free when
// admission from its window stops, at the rate admitted since the last
// block was taken (units over rateSince: see wantLocked). False while no
// rate is known.
func (s *blockSet) outlastsWindowLocked(b *block, now time.Time) bool {
	el := time.Since(s.rateSince).Seconds()
	if s.rateSince.IsZero() || s.units <= 0 || el <= 0 {
		return false
	}
	return b.free().Approx()/s.units*el >= b.resetAt.Add(-s.a.opts.Margin).Sub(now).Seconds()
}

// refillLocked starts taking a block of at least need units from the
// database, in the background: the requests that wait for it wait on
// s.refill, and Close waits for it too. With trimCurrent, the current block
// (which has no room for need) closes, and the same statement trims it to
// what it admitted, giving its unused units back to the window. Otherwise
// (or with no current block) the statement trims a block set aside for
// want of room and not trimmed yet (setAsideLocked): a block is set aside
// when the next one was taken ahead, and each such next block, once spent
// in turn, is set aside for the one taken after it, so that without this
// every block set aside within a round of the housekeeping (which trims
// them too) held its free units until then: more than the current and the
// next block, which is what a process that dies strands at most. The call
// does not use a caller's context: one that ended after the database
// granted the block would leave a block this process never learns of.
// It returns false, starting nothing, once the Limiter is closed.
func (s *blockSet) refillLocked(w windowLimit, need float64, trimCurrent bool) bool {
	if !s.a.beginRefill() {
		return false
	}
	s.refill = make(chan struct{})
	s.limit = w.Limit.Limit
	var trim *block
	var trimTo units
	if b := s.cur; trimCurrent && b != nil {
		trim, trimTo = b, b.spent()
		s.closeLocked(b, reasonTrimmed)
		s.cur = nil
	} else if b := s.setAsideLocked(); b != nil {
		trim, trimTo = b, b.spent()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), allotCallTimeout)
		defer cancel()
		t := s.takeBlock(ctx, w, need, trim, trimTo)
		s.mu.Lock()
		defer s.mu.Unlock()
		if trim != nil && t.ran {
			trim.trimmedTo(trimTo)
		}
		s.pauseUntil, s.pauseNeed = t.pauseUntil, t.pauseNeed
		s.endRefillLocked(t.block)
	}()
	return true
}

// setAsideLocked returns a block closed for want of room whose free units
// are still held in the database (not trimmed to what it admitted since, not
// returned), if any.
func (s *blockSet) setAsideLocked() *block {
	for _, b := range s.draining {
		if b.reason == reasonTrimmed && !b.gone && b.free().Sign() > 0 {
			return b
		}
	}
	return nil
}

// endRefillLocked installs the block taken (nil: none), and wakes the
// requests and the Close that waited for it.
func (s *blockSet) endRefillLocked(nb *block) {
	close(s.refill)
	s.refill = nil
	s.lastRefillGranted = nb != nil
	if nb != nil {
		s.installLocked(nb)
	}
	s.a.refills.Done()
}

// taken is what a block request came to.
type taken struct {
	block *block // nil when none was granted, or the request failed
	ran   bool   // the statement took effect, and so did its trim
	// No block is to be asked for a request of pauseNeed or more until
	// pauseUntil, on this host's clock (zero: none is put off).
	pauseUntil time.Time
	pauseNeed  float64
}

// takeBlock takes a block from the database (trimming trim first). When
// none is granted the request waiting for it is decided in the database,
// which reports any error itself; the Limiter's Stats count what came of
// each request (LocalStats). A window with no room for need puts off
// blocks asked for as much (noRoomBackoff), a failed request every block
// of the counter (failedBlockPause).
func (s *blockSet) takeBlock(ctx context.Context, w windowLimit, need float64, trim *block, trimTo units) taken {
	s.mu.Lock()
	want := s.wantLocked(w.Limit.Limit, need)
	s.mu.Unlock()
	p := db.AllotmentTakeParams{
		Holder: s.a.opts.Holder, ScopeType: s.key.scopeType, ScopeKey: s.key.scopeKey, Metric: s.key.metric,
		WindowSeconds: s.key.windowSeconds, LimitValue: w.Limit.Limit, Want: want, Need: need,
	}
	if trim != nil {
		p.TrimID, p.TrimTo = trim.id, pgtype.Text{String: trimTo.Text(), Valid: true}
	}
	row, err := s.a.allotTake(ctx, p)
	if err != nil {
		s.a.counts.fail(err)
		return failedTake(w)
	}
	granted, ok := decimal.Parse(row.Granted)
	if !ok {
		s.a.counts.fail(fmt.Errorf("ratelimit: block granted %q: not a number", row.Granted))
		return failedTake(w)
	}
	if !row.AllotmentID.Valid || granted.Sign() <= 0 {
		s.a.counts.noRoom.Add(1)
		pause := min(noRoomBackoff(w.windowSeconds), row.ResetAt.Sub(row.DbNow)) // past the window's end by the statement's time at most
		return taken{ran: true, pauseUntil: time.Now().Add(pause), pauseNeed: need}
	}
	s.a.counts.granted.Add(1)
	now := time.Now()
	b := &block{id: row.AllotmentID, windowStart: row.WindowStart, resetAt: row.ResetAt,
		limit: w.Limit.Limit, lastUse: now, endsLocal: now.Add(row.ResetAt.Sub(s.a.dbNow()))}
	b.granted = granted
	return taken{ran: true, block: b}
}

// failedTake is what a block request that failed came to: no block of its
// counter is asked for until failedBlockPause (or noRoomBackoff) is over.
func failedTake(w windowLimit) taken {
	return taken{pauseUntil: time.Now().Add(min(noRoomBackoff(w.windowSeconds), failedBlockPause))}
}

// wantLocked sizes the next block: what this process admits on the
// counter in Horizon at its recent rate, at least need (and 16 times need
// before any rate is known), at most MaxShare of the limit.
//
// The rate is measured over rateSpan at least. Over a shorter span since
// the last measurement, what was admitted in it counts as admitted in
// rateSpan: a rate the counter has at least (never more than a
// measurement over the span would say), so that a burst after a quiet
// spell is not sized at the quiet spell's rate (or at 16 times the
// request) for its first rateSpan, a block per round trip, but each block
// grows to some twenty times what the last ones admitted.
func (s *blockSet) wantLocked(limit, need float64) float64 {
	now := time.Now()
	rate := s.rate
	if !s.rateSince.IsZero() {
		if el := now.Sub(s.rateSince); el > rateSpan {
			s.rate = s.units / el.Seconds()
			s.units, s.rateSince = 0, now
			rate = s.rate
		} else {
			rate = max(rate, s.units/rateSpan.Seconds())
		}
	} else {
		s.rateSince = now
	}
	want := rate * s.a.opts.Horizon.Seconds()
	if rate == 0 {
		want = 16 * need
	}
	want = min(max(want, need), limit*s.a.opts.MaxShare)
	// Whole units where that still holds need: a block of whole units
	// admits whole amounts at float64's speed (see units).
	if w := math.Floor(want); w >= need {
		want = w
	}
	return want
}

// pausedLocked reports whether no block is to be asked for with room for
// need: one asked for with room for as much came back empty within
// noRoomBackoff, or one asked for failed within failedBlockPause.
func (s *blockSet) pausedLocked(need float64) bool {
	return time.Now().Before(s.pauseUntil) && need >= s.pauseNeed
}

// rateSpan is the shortest span the rate that sizes blocks is measured
// over (see wantLocked).
const rateSpan = 50 * time.Millisecond

// noRoomBackoff is how long a counter's Local requests are decided in the
// database, as any other limit, after a block asked for found no room in
// its window (never past the window's end): a sixteenth of the window, at
// least rateSpan. Asking again at each request made every request on a
// full window two statements, a block request that locks the counter row
// and then the decision, just when the window refuses: 200 refusals of a
// full window of 100 asked for 200 blocks. Room that comes back within the
// backoff (a grant released, another holder's block returned) is admitted
// by the database meanwhile, exactly.
func noRoomBackoff(windowSeconds int32) time.Duration {
	return max(time.Duration(windowSeconds)*time.Second/16, rateSpan)
}

// failedBlockPause bounds how long a counter's Local requests are decided
// in the database after a block request failed: a sixteenth of the window
// (noRoomBackoff), at most a second. A failure may pass at once (a lost
// session) or last (a role without the grants on
// gateway_rate_limit_allotments): a block request per counter per second
// costs nothing in either case, where one per request sent a failing
// statement more with each.
const failedBlockPause = time.Second

// open lists the blocks that are not returned yet.
func (s *blockSet) open() []*block {
	var out []*block
	for _, b := range append([]*block{s.cur, s.next}, s.draining...) {
		if b != nil && !b.gone {
			out = append(out, b)
		}
	}
	return out
}

// collect takes out the blocks that are done: those closed with nothing in
// flight, idle ones, and (when closing, or long after their window) every
// one, charging what is still in flight at its estimate. It also lists the
// blocks closed for want of room that still have requests in flight and
// units free, to be trimmed to what they admitted. It reads the estimate
// of the database's clock under the set's lock, as take does: one read
// before, by a round going through many counters, may be older than a
// block taken meanwhile, whose window would then seem not begun.
func (s *blockSet) collect(closing bool) (done []returning, trims []trimming) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.a.dbNow()
	s.retireLocked(now)
	for _, b := range []*block{s.cur, s.next} {
		if b == nil {
			continue
		}
		if closing {
			s.closeLocked(b, reasonClosed)
		} else if b.inflight == 0 && time.Since(b.lastUse) >= s.a.opts.IdleAfter {
			s.closeLocked(b, reasonIdle)
		}
	}
	s.dropClosedLocked()
	keep := s.draining[:0]
	for _, b := range s.draining {
		switch {
		case b.inflight == 0:
			done = append(done, returning{set: s, b: b, used: b.used, reason: b.reason})
			b.gone = true
		case closing || b.stuck(now, s.a.stuckAfter()):
			done = append(done, returning{set: s, b: b, used: b.spent(), reason: b.reason})
			b.gone = true
		default:
			// A block of an ended window is left alone by a trim.
			if b.reason == reasonTrimmed && b.free().Sign() > 0 && now.Before(b.resetAt) {
				trims = append(trims, trimming{set: s, b: b, to: b.spent(), limit: s.limit})
			}
			keep = append(keep, b)
		}
	}
	s.draining = keep
	return done, trims
}

// stuck reports whether b's window ended more than after ago, on the
// estimate of the database's clock (now) or on this host's: a request
// admitted from b and still in flight is then charged at its estimate.
// Either clock will do; on the database's alone, stepped back before b's
// window, b kept its units for as long as the step.
func (b *block) stuck(now time.Time, after time.Duration) bool {
	return now.After(b.resetAt.Add(after)) || time.Since(b.endsLocal) > after
}

// idleLocked reports whether the set holds nothing (no block, none being
// taken) and no request came for one for IdleAfter: it may be dropped,
// and only its measured rate goes with it, which is stale by then.
func (s *blockSet) idleLocked() bool {
	return s.cur == nil && s.next == nil && len(s.draining) == 0 && s.refill == nil &&
		time.Since(s.lastTake) >= s.a.opts.IdleAfter
}

// requeueLocked puts back a block whose return failed, to be returned on
// the next round (or by Close).
func (s *blockSet) requeueLocked(b *block) {
	b.gone = false
	s.draining = append(s.draining, b)
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
