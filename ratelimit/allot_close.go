package ratelimit

import (
	"github.com/pgadmit/pgadmit/internal/poolerr"
)

// close returns every block (charging requests still in flight at their
// estimates) and stops the housekeeping. A close while another runs waits
// for it, so that neither returns before the blocks are back.
func (a *allotments) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.closed = true
	started := a.started
	a.mu.Unlock()
	defer close(a.done)
	if started {
		close(a.stop)
		<-a.stopped
	}
	a.refills.Wait()
	// Close has no next round: a return that failed on a session the server
	// had ended is sent once more, on a new one (the pool dropped the dead
	// one), and so is one that met pgx's statement cache on a session that
	// does not hold the statement (behind a transaction pooler: pgx dropped
	// it from its cache and prepares it anew). A return is idempotent. A
	// timeout is not tried again, so that a Close on a hanging database
	// waits for one call's timeout, not two.
	if err := a.housekeep(true); sessionLost(err) || poolerr.StatementCacheLost(err) {
		_ = a.housekeep(true)
	}
	a.abandonUnreturned()
}

// abandonUnreturned lets go of the blocks Close could not return (the
// database unreachable, a lock timeout): nothing of this Limiter reaches
// them any more, and Recover returns them once their window is over,
// charging their last report. A later Commit or Release of what they
// admitted, of the grant or of a copy, reports StatusUnknown: it used to
// report Settled true with an actual amount no counter would record.
func (a *allotments) abandonUnreturned() {
	for _, s := range a.snapshot() {
		s.mu.Lock()
		for _, b := range s.open() {
			b.abandoned, b.admissions = true, nil
			a.counts.abandoned.Add(1)
		}
		s.cur, s.next, s.draining = nil, nil, nil
		s.mu.Unlock()
	}
}
