package ratelimit

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// giveBackUnheld runs giveBack, which gives back what nobody holds
// (retryUnheld: for up to unheldReleaseSpan from now while the database is
// down, the time it may wait its turn included),
// off the caller's goroutine: the caller's answer does not depend on it
// (its context's error, or the failure it was told of), so a caller who
// left is not held while the give-back retries. At most
// unheldAtOnce(l.conn) run at once, the rest waiting their turn (backlog).
// Close waits for them all. On a single connection and inside a caller's
// transaction it runs on the caller's goroutine: a statement there must
// not run beside the caller's next one (oneConnection); a single
// connection that fails is closed, and the give-back stops at once
// (hopeless).
func (l *Limiter) giveBackUnheld(giveBack func(handedOver time.Time)) {
	if l.inTx || oneConnection(l.conn) || l.unheld == nil {
		giveBack(time.Now())
		return
	}
	l.unheld.add(giveBack) // the backlog tells it when it was added
}

// unheldAtOnce is how many give-backs giveBackUnheld runs at once on
// conn: half a pool's connections (MaxConns), one at least, so that in a
// storm of callers leaving the live calls keep the other half (each
// give-back's statement takes a connection of its own: a Release
// WithoutCombining, a task's undo, a hot batch's release of what it could
// not confirm on a Limiter that does not combine); defaultUnheldAtOnce on
// an Executor of another kind.
func unheldAtOnce(conn Executor) int {
	if pool, ok := conn.(*pgxpool.Pool); ok && pool != nil {
		return max(int(pool.Config().MaxConns)/2, 1)
	}
	return defaultUnheldAtOnce
}

// defaultUnheldAtOnce is unheldAtOnce's bound on an Executor that is not
// a *pgxpool.Pool: half of pgxpool's least default MaxConns (4) would be
// 2; an Executor of one's own, wrapping a pool or several, may have more.
const defaultUnheldAtOnce = 4

// dropGiveBack is how the Limiter's backlog (unheld) ends a give-back it
// dropped, waiting beyond its bound (queuedAtMost): it never runs, and
// what it would have given back stays held (until a window, a lease's TTL
// or Recover ends it), counted lost as a give-back whose tries ran out is
// (retryUnheld).
func (l *Limiter) dropGiveBack(func(time.Time), time.Time) { l.lost.Add(1) }

// runGiveBack is how the Limiter's backlog (unheld) runs a job.
func runGiveBack(giveBack func(time.Time), handedOver time.Time) { giveBack(handedOver) }
