package ratelimit

import (
	"context"
	"errors"
	"time"
)

// releaseUnheld gives back a grant that nobody holds: one decided after
// its caller left (reasonAbandoned), or one a hot batch decided whose
// commit could not be confirmed (reasonUnconfirmed). Only this process
// knows its ids, so a release that fails is tried again: Release is
// idempotent, and a grant not released stays held until its window or
// lease TTL ends. After a restart or a failover every idle connection of
// the pool fails its first statement (pgxpool pings only those idle for
// over a second), each failure taking one of them out, so the tries go on
// for unheldReleaseSpan, not for a number of tries; the span is short, so
// that Limiter.Close, which waits for them, is not held up long by a
// database that is down.
func (l *Limiter) releaseUnheld(g Grant, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonedReleaseTimeout)
	defer cancel()
	giveUp := time.Now().Add(unheldReleaseSpan)
	pause := unheldReleasePause
	for {
		_, err := l.Release(ctx, g, reason)
		if err == nil || errors.Is(err, ErrInvalidInput) || time.Now().After(giveUp) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, unheldReleaseSpan/4)
	}
}

const (
	// unheldReleaseSpan is how long releaseUnheld tries; the pauses between
	// tries double from unheldReleasePause.
	unheldReleaseSpan  = 2 * time.Second
	unheldReleasePause = 5 * time.Millisecond
)
