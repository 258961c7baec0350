package ratelimit

import (
	"sync"
	"sync/atomic"
)

// LocalStats counts what the statements that take, report, trim and return
// the blocks of Local limits did (see AllotmentOptions). They run in the
// background, off every caller's path: a failure there is no caller's
// error, and without these counts it would go unseen (a gateway role that
// may not write gateway_rate_limit_allotments, say, has every Local limit
// decided in the database, at a statement per request).
type LocalStats struct {
	// Granted counts the block requests the database granted, NoRoom
	// those that found no room in their window.
	Granted, NoRoom int64
	// Failed counts the statements of blocks that failed (a block request,
	// a report, a trim, a return), and LastError is the last one's error,
	// nil before any. After a block request fails, the counter's Local
	// requests are decided in the database for a sixteenth of its window,
	// at most a second; after one finds no room, those at least as large
	// are, for a sixteenth of the window (at least 50 ms, never past its
	// end). A report, trim or return that failed is tried again on the
	// next round.
	Failed    int64
	LastError error
	// Abandoned counts blocks Close could not return: Recover returns them
	// once their window is over, charging their holder's last report.
	Abandoned int64
	// FromBlocks counts the Local limits of Reserve calls that a block
	// admitted, with no round trip (an admission another of its limits
	// refused gives their units back), and InDatabase those no block could
	// serve, which the database decided as any other limit: in a window's
	// last moments (AllotmentOptions.Margin), while block requests fail or
	// find no room, for an amount above MaxShare of its limit, or once the
	// Limiter is closed. A call whose context had ended when it began counts
	// in neither, nor does a limit whose context ended while it waited for a
	// block (the call returns the context's error).
	FromBlocks, InDatabase int64
}

// localCounts keeps the counts of LocalStats.
type localCounts struct {
	granted, noRoom, failed, abandoned, inDatabase atomic.Int64
	mu                                             sync.Mutex
	lastError                                      error
}

func (c *localCounts) fail(err error) {
	c.failed.Add(1)
	c.mu.Lock()
	c.lastError = err
	c.mu.Unlock()
}

func (c *localCounts) stats() LocalStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return LocalStats{Granted: c.granted.Load(), NoRoom: c.noRoom.Load(), Failed: c.failed.Load(),
		LastError: c.lastError, Abandoned: c.abandoned.Load(), InDatabase: c.inDatabase.Load()}
}

// localStats is LocalStats of this Limiter's blocks (zero without any).
// FromBlocks is the sequence of the last Local admission (each takes the
// next: see localID), so that a block's admission adds no count of its own.
func (a *allotments) localStats() LocalStats {
	if a == nil {
		return LocalStats{}
	}
	s := a.counts.stats()
	s.FromBlocks = int64(a.seq.Load())
	return s
}
