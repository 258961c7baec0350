package ratelimit

// Stats says how this Limiter combined Reserve calls and Commit/Release
// calls (zero without combining), what it may have left held, how many
// give-backs wait their turn, and what came of the statements of its Local
// limits' blocks.
type Stats struct {
	// Reserve counts the statements of combined Reserve calls, and Settle
	// those of combined Commit and Release calls (zero without combining).
	Reserve CombinerStats
	Settle  CombinerStats
	// Lost counts what this Limiter may have left held with nobody to give
	// it back, combining or not. What they hold stays held until a lease's
	// TTL, its window's end or Recover ends it. It counts:
	//   - Reserve calls whose statement was sent and then got no answer,
	//     which the server may have committed: its connection failed, or,
	//     on a pool set up with ConfigurePool, the server never
	//     acknowledged the cancel request of a statement whose callers had
	//     all left (with pgx's default handler such a statement is not
	//     counted). A Reserve that failed so with its caller still waiting
	//     counts too: its caller got an error, and nobody knows of what it
	//     may have been granted.
	//   - block requests of Local limits that lost their answer so: a block
	//     the server granted that this Limiter never learns of, held until
	//     Recover returns it after its window.
	//   - give-backs of what nobody held (a grant decided after its caller
	//     left, a task created or claimed so) that failed for good, or that
	//     waited their turn beyond the bound of those waiting: dropped (see
	//     Limiter.Close). Each is counted in GiveBacksFailed or
	//     GiveBacksDropped too, which tell them apart.
	//
	// Not counted: a statement the server failed (rolled back); one never
	// sent (a pool that could not open a connection for it, or was closed,
	// sent nothing); anything inside a caller's transaction (its rollback
	// ends it).
	Lost int64
	// GiveBacksDropped counts, of Lost, the give-backs of what nobody held
	// that were dropped, never tried, because the queue of those waiting
	// their turn was full (see Limiter.Close). Lost keeps its total: Lost
	// minus GiveBacksDropped and GiveBacksFailed is the Reserve calls and
	// block requests that lost their answer, while a rising
	// GiveBacksDropped is give-backs handed over faster than the database
	// takes them (a storm of callers leaving, a slow or locked database).
	GiveBacksDropped int64
	// GiveBacksFailed counts, of Lost, the give-backs of what nobody held
	// that were tried and failed for good: a failure no later try could
	// mend (a closed pool or connection), or tries that ran out, for about
	// 2 s from their hand-over, with the database or the network down. A
	// reading of Stats never has GiveBacksDropped and GiveBacksFailed
	// together above Lost.
	GiveBacksFailed int64
	// GiveBacksWaiting is a gauge, not a count: the give-backs of what
	// nobody held that are queued now, waiting their turn, not yet
	// running (in the Limiter's two queues: the releases of what combined
	// Reserves granted callers who left, and the others; see
	// Limiter.Close). It falls back to 0 once they ran, as Close waits
	// for; a queue that stays full drops the oldest. Always 0 on a single
	// connection and inside a caller's transaction, where they run on the
	// caller's goroutine.
	GiveBacksWaiting int64
	// Local counts what the statements of Local limits' blocks did, and
	// their failures (zero without a Local limit).
	Local LocalStats
}

// Stats returns this Limiter's counts since New: how its Reserve and
// Commit/Release calls were combined, what it may have left held with
// nobody to give it back (Lost), the give-backs waiting their turn, and
// what the statements of its Local limits' blocks did. A Limiter not made
// with New (a zero or nil one) reports zeros.
func (l *Limiter) Stats() Stats {
	if l.usable() != nil {
		return Stats{}
	}
	dropped, failed := l.dropped.Load(), l.failed.Load() // before lost (countLostGiveBack)
	return Stats{Reserve: l.reserves.stats(), Settle: l.settles.stats(), Lost: l.lost.Load(), GiveBacksDropped: dropped,
		GiveBacksFailed: failed, GiveBacksWaiting: int64(l.unheld.waiting() + l.reserves.givesWaiting()), Local: l.allot.localStats()}
}
