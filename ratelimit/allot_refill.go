package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/decimal"
)

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
