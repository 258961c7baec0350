package ratelimit

import (
	"time"
)

// givingBackAtOnce is how many calls of abandoned a combiner of maxBatch
// requests a batch, maxInFlight batches at once, runs at once. Reserve's
// give a grant back with a Release, which the Limiter's settle combiner,
// made with the same two, sends maxBatch to a statement, maxInFlight
// statements at once: twice that keeps the next statements' worth waiting
// while those run. More would only wait in its queue, a goroutine each.
func givingBackAtOnce(maxBatch, maxInFlight int) int {
	const most = 1 << 14
	if maxBatch >= most/2 || maxInFlight >= most/(2*maxBatch) {
		return most
	}
	return 2 * maxBatch * maxInFlight
}

// giveBack runs abandoned on a result, on one of the goroutines of gives:
// a goroutine each, with no bound, piled up behind give-backs that were
// slow (their Release statements behind a lock, or retried while the
// database was unreachable) in a storm of callers leaving. Each one's
// tries are timed from when deliver handed it over (retryUnheld), so that
// with the database unreachable those waiting their turn give up with
// the others, and drain waits no longer than it did for a goroutine each.
// Each counts as releasing until it returned: drain waits for the last.
func (c *combiner[Req, Res]) giveBack(res Res, handedOver time.Time) {
	c.abandoned(res, handedOver)
	c.releaseDone()
}

// dropGiveBack ends a result that gives dropped, beyond its bound, before
// abandoned ran on it: dropped counts it, and it no longer counts as
// releasing.
func (c *combiner[Req, Res]) dropGiveBack(res Res, _ time.Time) {
	if c.dropped != nil {
		c.dropped(res)
	}
	c.releaseDone()
}
