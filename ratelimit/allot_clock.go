package ratelimit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// dbNow estimates the database's clock: its last reading plus the time
// elapsed since on this host (sinceLocal).
func (a *allotments) dbNow() time.Time {
	now, _ := a.dbClock()
	return now
}

// dbClock is dbNow, and whether the database's clock was read yet (before
// that, this host's clock stands in).
func (a *allotments) dbClock() (time.Time, bool) {
	a.mu.Lock()
	dbAt, localAt := a.dbAt, a.localAt
	a.mu.Unlock()
	if localAt.IsZero() {
		return time.Now(), false
	}
	return dbAt.Add(a.sinceLocal(localAt)), true
}

// readClock records a reading of the database's clock, dbNow, by a
// statement sent at sent (see allotTake for why sent). A reading sent
// before the one held is older and is dropped: statements of the
// housekeeping and of refills overlap.
func (a *allotments) readClock(dbNow, sent time.Time) {
	if step := a.l.opts.dbClockStep; step != nil {
		dbNow = dbNow.Add(step())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.localAt.IsZero() || !sent.Before(a.localAt) {
		a.dbAt, a.localAt = dbNow, sent
	}
}

// sinceLocal is the time elapsed since localAt on this host: on its
// monotonic clock, so that a step back of the wall clock (NTP) does not
// take the estimate back, or on its wall clock when that moved further:
// the monotonic clock stops while the host sleeps (a suspended machine, a
// hibernated VM; see package time), and the database's clock does not. An
// estimate behind the database's clock would admit from blocks past their
// window; one ahead only ends them early.
func (a *allotments) sinceLocal(localAt time.Time) time.Duration {
	now := time.Now()
	if a.l.opts.wallClock != nil {
		now = a.l.opts.wallClock()
	}
	return max(time.Since(localAt), now.Round(0).Sub(localAt.Round(0)))
}

// windowEnding reports whether the current window of windowSeconds ends
// within Margin on the database's clock: a block taken now would admit
// nothing (and one is taken, and returned, per request). False before the
// database's clock was read: the first block reads it.
func (a *allotments) windowEnding(windowSeconds int32) bool {
	now, known := a.dbClock()
	if !known {
		return false
	}
	w := int64(windowSeconds) * int64(time.Second) // windows are aligned to the Unix epoch
	ns := now.UnixNano()
	return a.pastMargin(now, time.Unix(0, ns-ns%w+w))
}

// stuckAfter is how long after its window's end a block waits for the
// requests it admitted that are still in flight: allotStuckAfter, unless a
// test set it.
func (a *allotments) stuckAfter() time.Duration {
	if d := a.l.opts.stuckAfter; d > 0 {
		return d
	}
	return allotStuckAfter
}

// pastMargin reports whether now is within Margin of resetAt, a window's
// end: no block admits from that window any more.
func (a *allotments) pastMargin(now, resetAt time.Time) bool {
	return !now.Before(resetAt.Add(-a.opts.Margin))
}

// admits reports whether b may admit at now, the estimate of the
// database's clock: from its window's start to Margin before its end.
// Before the start, the database's clock stepped back (NTP, a failover to
// a host whose clock is behind): the database counts an earlier window,
// whose counter admits its own limit, and admitting from b as well would
// admit more than the limit within that time.
func (a *allotments) admits(now time.Time, b *block) bool {
	return !now.Before(b.windowStart) && !a.pastMargin(now, b.resetAt)
}

// allotTake runs AllotmentTake and reads the database's clock.
//
// db_now is now(), read when the statement starts, before it waits for the
// counter row (and a Local counter is a hot one): it is not the middle of
// the call, which may have waited for seconds, but some instant after
// sent, taken once the statement has a session (onSession). Measured
// against sent, the estimate can only run ahead of the database's clock (by
// the time to send), which ends blocks early; against the middle of a call
// that waited, it fell behind by half the wait, and blocks admitted past
// their window's end.
//
// A request that was sent and lost its answer counts as lost (Stats.Lost,
// see countLost): the server may have granted a block that this process
// never learns of, and so never admits from, reports or returns; its units
// stay reserved until Recover returns it after its window.
func (a *allotments) allotTake(ctx context.Context, p db.AllotmentTakeParams) (db.AllotmentTakeRow, error) {
	ctx, cut := withCutMark(ctx)
	var row db.AllotmentTakeRow
	sent, err := a.onSession(ctx, func(conn db.DBTX) (err error) {
		row, err = a.l.queries.AllotmentTake(ctx, conn, p)
		return err
	})
	if err != nil {
		if !sent.IsZero() { // the pool gave it a session: its error is the statement's
			a.l.countLost(1, err, cut.Load())
		}
		return row, err
	}
	a.readClock(row.DbNow, sent)
	return row, nil
}

// onSession runs query, which reads the database's clock, and returns when
// it was sent: on a pool, once a session is acquired (zero when none was:
// nothing was sent). Stamped before the
// wait for one, a reading put the estimate ahead by that wait, ending
// blocks that much early: all of them at once, on a pool busy for longer
// than a window's admitting part (a block of a one-second window taken
// after a second's wait was closed as soon as it came, and another taken).
func (a *allotments) onSession(ctx context.Context, query func(db.DBTX) error) (time.Time, error) {
	pool, ok := a.l.conn.(*pgxpool.Pool)
	if !ok {
		return time.Now(), query(a.l.conn)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Release()
	return time.Now(), query(conn)
}
