package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// releaseUnheld gives back a grant that nobody holds: one decided after
// its caller left (reasonAbandoned), or one a hot batch decided whose
// commit could not be confirmed (reasonUnconfirmed). Release is
// idempotent, so it is tried again (retryUnheld).
func (l *Limiter) releaseUnheld(g Grant, reason string, handedOver time.Time) {
	l.retryUnheld(handedOver, func(ctx context.Context) error {
		_, err := l.Release(ctx, g, reason)
		return err
	})
}

// retryUnheld runs giveBack, an idempotent statement that gives back what
// nobody holds (a grant, a task created or claimed for a caller who left),
// until it succeeds or fails in a way no later try can mend (hopeless).
// Only this process knows what it names, and what it does not give back
// stays held until a window, a lease's TTL or Recover ends it. After a
// restart or a failover an idle connection of the pool may fail its first
// statement, each failure taking one of them out (ConfigurePool replaces
// one whose socket shows the server ended its session, not one lost
// without a word), so the tries go on for unheldReleaseSpan, not for a
// number of tries. The span is short: Limiter.Close waits for the
// give-backs, and on a single connection so does their caller
// (giveBackUnheld). Both are timed from handedOver, when the give-back
// was handed to the background, not from when its turn came to run: with
// the database unreachable, a give-back that waited behind others
// (backlog) tries once and gives up with them, so that Close waits no
// longer than for a goroutine each. A give-back given up on counts as
// lost and failed (countLostGiveBack).
func (l *Limiter) retryUnheld(handedOver time.Time, giveBack func(context.Context) error) {
	if !l.tryUnheld(handedOver, giveBack) {
		l.countLostGiveBack(l.failed)
	}
}

// tryUnheld runs retryUnheld's tries, and reports whether one succeeded.
func (l *Limiter) tryUnheld(handedOver time.Time, giveBack func(context.Context) error) bool {
	ctx, cancel := context.WithDeadline(context.Background(), handedOver.Add(abandonedReleaseTimeout))
	defer cancel()
	giveUp := handedOver.Add(unheldReleaseSpan)
	pause := unheldReleasePause
	for {
		if l.opts.unheldTry != nil {
			l.opts.unheldTry()
		}
		err := giveBack(ctx)
		if err == nil {
			return true
		}
		if l.hopeless(err) || time.Now().After(giveUp) {
			return false
		}
		// No pause outlasts the span: the last try comes as it ends, where a
		// pause of up to a quarter span began just before it (Close waited
		// 2.75 s for a span of 2 s).
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(pause, time.Until(giveUp))):
		}
		pause = min(2*pause, unheldReleaseSpan/4)
	}
}

// hopeless reports whether err of a give-back would come again on every
// try: a failure on its input (ErrInvalidInput), a closed pool (pgxpool
// returns puddle.ErrClosedPool from every statement once Close was
// called), or a single connection that is closed (pgconn.ErrConnClosed: a
// pool replaces a closed connection, a single one stays closed). Closing
// the Limiter is none of them: Close waits for these give-backs, and its
// pool stays open.
func (l *Limiter) hopeless(err error) bool {
	if errors.Is(err, ErrInvalidInput) || errors.Is(err, puddle.ErrClosedPool) {
		return true
	}
	return oneConnection(l.conn) && errors.Is(err, pgconn.ErrConnClosed)
}

const (
	// unheldReleaseSpan is how long retryUnheld tries; the pauses between
	// tries double from unheldReleasePause.
	unheldReleaseSpan  = 2 * time.Second
	unheldReleasePause = 5 * time.Millisecond
)
