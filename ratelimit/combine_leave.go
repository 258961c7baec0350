package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

// leftStatementGrace is how long a statement may still run once every
// caller in it has left. Answered within it, what it granted them is
// given back (abandoned); past it, it is cancelled. It covers what
// remains of a statement the server is running (its commit's flush, the
// answer on its way: milliseconds), and it is short because a caller
// alone in its batch waits for its statement (start): a caller that a
// hanging database would keep waiting past its deadline is kept at most
// this much longer (httpadmit's decision timeout counts on it).
const leftStatementGrace = 100 * time.Millisecond

// flight is one batch's statement, from send to answer, when every caller
// in it can leave.
type flight struct {
	left       atomic.Int64 // callers whose context ended
	holdsPlace bool         // the batch runs on an in-flight place
	// On the combiner's mu:
	answered bool // the statement returned
	detached bool // every caller left first; the batch gave its place up
}

// sendContext is the context one batch's statement runs in: its callers'
// values, without their cancellation or deadlines. A statement once sent
// is not cancelled because its callers leave: the server may have
// committed it already (its answer on the way, or its commit waiting for
// its flush), and the grants it made, which only its answer names, would
// then stay held until their window or lease TTL ends. It runs to its
// answer, and what it granted callers who left goes to abandoned.
//
// Once every caller has left (each one's context ended; a batch with a
// caller that cannot leave waits for its answer, however long), the batch
// is detached (leave) and the statement cancelled if it is still
// unanswered leftGrace later. On a pool set up with ConfigurePool, pgx
// sends the server a cancel request and reads the statement's answer: it
// was rolled back, or it committed and its grants go to abandoned (a hot
// batch whose commit fails after its answer releases them itself:
// hotbatch.go). With
// pgx's default, pgx gives the connection up at once (it sends the
// request, then closes the connection, never reading the answer), and a
// statement that the server committed before the request
// landed (its lock released first, or its commit under way) is as lost as
// a commit whose acknowledgement a dropped connection lost. The returned
// cancel ends the context once the statement is answered; f is nil when
// some caller cannot leave.
func (c *combiner[Req, Res]) sendContext(batch []*combined[Req, Res], holdsPlace bool) (context.Context, *flight, context.CancelFunc) {
	base := batch[0].ctx
	allCancellable := true
	for _, p := range batch {
		if p.ctx.Done() == nil {
			allCancellable = false
		}
	}
	if base.Done() != nil {
		base = context.WithoutCancel(base)
	}
	if !allCancellable {
		return base, nil, func() {}
	}
	ctx, cancelStatement := context.WithCancel(base)
	f := &flight{holdsPlace: holdsPlace}
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if f.left.Add(1) == int64(len(batch)) {
				c.leave(f, cancelStatement)
			}
		})
	}
	return ctx, f, func() {
		for _, stop := range stops {
			stop()
		}
		cancelStatement()
	}
}

// leave handles a batch whose callers have all left before its answer:
// its statement is cancelled leftGrace from now if still unanswered, and
// a batch that holds an in-flight place gives it to the queue, so that a
// statement nobody waits for does not hold up the callers behind it. The
// batch counts as releasing until it is answered and its grants handed to
// abandoned: drain waits for it.
func (c *combiner[Req, Res]) leave(f *flight, cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.answered {
		return
	}
	time.AfterFunc(c.leftGrace, cancel)
	if !f.holdsPlace {
		return
	}
	f.detached = true
	c.releasing++
	c.inFlight--
	if len(c.queue) > 0 && c.inFlight < c.maxInFlight {
		c.inFlight++
		go c.flushQueued()
	}
}
