package ratelimit

import (
	"runtime"
	"time"
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
	l.giveBackUnheldAfter(nil, giveBack)
}

// giveBackUnheldAfter is giveBackUnheld of a give-back that must wait
// first, until wait returns (nil: it need not). Off the caller's
// goroutine, it waits on a goroutine of its own, and only then takes its
// turn: a give-back that waits holds none of the turns of the others
// meanwhile. Close waits for it all the same.
func (l *Limiter) giveBackUnheldAfter(wait func(), giveBack func(handedOver time.Time)) {
	if l.inTx || oneConnection(l.conn) || l.unheld == nil {
		if wait != nil {
			wait()
		}
		giveBack(time.Now())
		return
	}
	if wait != nil {
		l.unheld.addAfter(wait, giveBack)
		return
	}
	l.unheld.add(giveBack) // the backlog tells it when it was added
}

// unheldAtOnce is how many give-backs giveBackUnheld runs at once on
// conn, an Executor that runs statements side by side (New makes no
// backlog on a single connection or a transaction, where they run on the
// caller's goroutine, one at a time): half its pool's connections
// (MaxConns), one at least, so that in a storm of callers leaving the live
// calls keep the other half (each give-back's statement takes a
// connection of its own: a Release WithoutCombining, a task's undo, a hot
// batch's release of what it could not confirm on a Limiter that does not
// combine). The pool is a *pgxpool.Pool, or one that an Executor of one's
// own embeds (its Config method, where execMode finds it: shownConn). An
// Executor of one's own that shows no pool is taken for one of pgxpool's
// default size (defaultUnheldAtOnce). conn is not a nil pool, nor a
// wrapper of one (orNoConn).
func unheldAtOnce(conn Executor) int {
	if pool, ok := shownPool(conn); ok {
		return max(int(pool.Config().MaxConns)/2, 1)
	}
	return defaultUnheldAtOnce()
}

// defaultUnheldAtOnce is unheldAtOnce's bound on an Executor of one's own
// that shows no pool: half of pgxpool's default MaxConns, which is the
// number of CPUs, pgxpoolLeastMaxConns at least.
func defaultUnheldAtOnce() int { return max(pgxpoolLeastMaxConns, runtime.NumCPU()) / 2 }

// pgxpoolLeastMaxConns is the least of pgxpool's default MaxConns (a
// pool_max_conns not set), which is the number of CPUs when more.
const pgxpoolLeastMaxConns = 4

// dropGiveBack is how the Limiter's backlog (unheld) ends a give-back it
// dropped, waiting beyond its bound (queuedAtMost): it never runs, and
// what it would have given back stays held (until a window, a lease's TTL
// or Recover ends it), counted (countDropped).
func (l *Limiter) dropGiveBack(func(time.Time), time.Time) { l.countDropped() }

// countDropped counts a give-back dropped from a full queue, the
// Limiter's (dropGiveBack) or its Reserve combiner's, as lost and dropped
// (countLostGiveBack).
func (l *Limiter) countDropped() { l.countLostGiveBack(l.dropped) }

// runGiveBack is how the Limiter's backlog (unheld) runs a job.
func runGiveBack(giveBack func(time.Time), handedOver time.Time) { giveBack(handedOver) }
