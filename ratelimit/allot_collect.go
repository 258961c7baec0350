package ratelimit

import (
	"time"
)

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
