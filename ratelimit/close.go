package ratelimit

// Close gives back what this Limiter holds and waits for its background
// work. Call it when the process stops, once it makes no more calls (after
// http.Server.Shutdown, say), and before closing the pool, which it does
// not close: what the background work gives back would be lost if the pool
// closed first.
//
// It returns the blocks of Local limits this Limiter holds, charging
// requests still in flight at their estimates, and stops its housekeeping;
// later Local limits are decided in the database. Blocks of a process that
// does not close stay reserved until their window ends, and so do those a
// Close could not return (the database unreachable): Maintenance.Recover
// returns them, charging their last report, and a Commit or Release of
// what they admitted reports StatusUnknown.
//
// It then waits for the combined statements in flight, those whose callers
// all left included (each bounded by 100 ms after its last caller left),
// and for the give-backs of what nobody holds, which run in the
// background: the release of what a Reserve granted a caller who had left,
// or what a hot batch granted and could not confirm, and the undo of a
// task created or claimed for a caller who had left. Each is tried again
// for up to 2 s while it fails, 30 s at most in all (a try that hangs),
// both counted from when it was handed to the background. On a single
// connection they run before the call that handed them over returns.
//
// Give-backs run a bounded number at a time, the rest waiting their turn
// (one waiting past its 2 s still tries once; 200 waiting per one running
// at most, 65536 in all, beyond which each new one drops the oldest
// waiting, counted in Stats.GiveBacksDropped and Stats.Lost;
// Stats.GiveBacksWaiting says how many wait now). At a time run: the
// releases of what a combined Reserve granted, twice a combined
// statement's worth for each statement in flight (WithCombining); the
// others, each a statement on a connection of its own, half the pool's
// MaxConns (one at least; on an Executor of one's own that embeds no
// *pgxpool.Pool, half of pgxpool's default, which is 4 or the number of
// CPUs, whichever is more), so that live calls keep the other half.
//
// A Close called while another runs waits for it; one called after it
// waits only for what calls made since started (at once when there were
// none).
func (l *Limiter) Close() {
	if l == nil { // a zero Limiter has nothing to close either
		return
	}
	if l.allot != nil {
		l.allot.close()
	}
	if l.reserves != nil { // combining is on
		l.reserves.drain()
		l.settles.drain()
	}
	if l.unheld != nil { // after the combiners: their batches start give-backs
		l.unheld.wait()
	}
}
