package ratelimit

import (
	"context"
	"sync"
	"time"
)

// A combiner turns concurrent calls of one operation into batches, each one
// statement and one transaction: rows are locked once, in the lock order,
// and the batch pays one commit. It has no timer. A caller that finds fewer
// than maxInFlight batches running sends at once, with the callers that
// were woken with it, alone if it is alone (see start); callers that arrive
// while batches run wait in the queue and go together, in arrival order, as
// soon as one finishes (with those that its end woke: see stream). Every
// caller can leave when its context ends, except one alone in its batch,
// who runs its statement itself and leaves once it is answered (see
// sendContext).
type combiner[Req, Res any] struct {
	maxBatch    int
	maxInFlight int
	// weight, when set, is what a request adds to its statement's rows; a
	// batch takes requests while they weigh maxWeight at most (and always
	// takes its first).
	weight    func(Req) int
	maxWeight int
	// leftGrace is how long a statement may still run once every caller
	// in it has left before it is cancelled (see sendContext).
	leftGrace time.Duration
	// run executes one batch and returns a result and an error per
	// request, or an error for the whole batch.
	run func(ctx context.Context, reqs []Req) ([]Res, []error, error)
	// abandoned is called, off the caller's goroutine, with the result of a
	// request whose caller stopped waiting (its context ended) before the
	// batch returned: what it was granted must not stay held. They run
	// givingBackAtOnce at a time, the rest waiting their turn (gives).
	abandoned func(res Res, handedOver time.Time)
	// dropped is told of each result that gives dropped, waiting beyond
	// its bound, before abandoned ran on it (nil: nobody is).
	dropped func(res Res)
	gives   *backlog[Res]

	mu       sync.Mutex
	queue    []*combined[Req, Res]
	inFlight int
	// left counts the callers gone (leftUnsent) whose requests are still
	// queued, which leftUnsent weighs against the queue's length:
	// takeLocked subtracts those it drops. A caller who leaves as
	// takeLocked drops its request may be counted after that: left is
	// then one short for a moment, or one over until the queue next
	// empties or is compacted.
	left      int
	releasing int           // abandoned calls, statements that every caller left (detached) and runs again of rejected batches, running
	idle      *sync.Cond    // on mu: inFlight and releasing both fell to 0
	batches   int64         // statements answered
	requests  int64         // requests they carried
	busy      time.Duration // their time from taking a connection to the answer, summed
	hot       int64         // of them, those sent as hot batches (markHot)
	// waiting counts the calls queued (do) or carried by a statement in
	// flight, until withdrawn (leftUnsent, takeLocked, runBatch) or their
	// statement returns (answered): CombinerStats.Waiting. It moves only
	// under mu, taken anyway at each of those.
	waiting int64
}

// combined is one request waiting for its batch.
type combined[Req, Res any] struct {
	req  Req
	ctx  context.Context
	res  Res
	err  error
	done chan struct{}

	mu        sync.Mutex // guards gone, taken and delivered
	gone      bool       // the caller stopped waiting
	taken     bool       // takeLocked took the request off the queue: into a batch, or dropped as its ctx had ended
	delivered bool       // res and err are set (and done is closed)
}

func newCombiner[Req, Res any](maxBatch, maxInFlight int, run func(context.Context, []Req) ([]Res, []error, error), abandoned func(Res, time.Time)) *combiner[Req, Res] {
	c := &combiner[Req, Res]{maxBatch: max(maxBatch, 1), maxInFlight: max(maxInFlight, 1), leftGrace: leftStatementGrace, run: run, abandoned: abandoned}
	if abandoned != nil {
		c.gives = newBacklog(givingBackAtOnce(c.maxBatch, c.maxInFlight), c.giveBack, c.dropGiveBack)
	}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// weighed bounds c's batches to requests weighing maxWeight in all (a
// request heavier than that goes alone), and returns c.
func (c *combiner[Req, Res]) weighed(maxWeight int, weight func(Req) int) *combiner[Req, Res] {
	c.weight, c.maxWeight = weight, maxWeight
	return c
}

// drain waits until no batch is in flight, no statement that its callers
// left still runs and no abandoned call runs: what a batch granted a
// caller who had left is then given back, on a pool that is still open.
// Calls that keep coming keep it waiting.
func (c *combiner[Req, Res]) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inFlight > 0 || c.releasing > 0 {
		c.idle.Wait()
	}
}

// settledLocked wakes drain once nothing is in flight or releasing.
func (c *combiner[Req, Res]) settledLocked() {
	if c.inFlight == 0 && c.releasing == 0 {
		c.idle.Broadcast()
	}
}

// do runs req in the next batch and returns its result. When ctx ends first
// it returns ctx's error; a request not yet sent is then never sent, and
// what a request sent was granted goes to abandoned. A caller alone in its
// batch runs the statement on its own goroutine (start) and so returns
// once it is answered, with ctx's error if ctx ended meanwhile. A ctx
// already over sends nothing, as a call not combined sends nothing
// (runToAnswer): the statement, run without ctx's cancellation
// (sendContext), would otherwise go out, grant what abandoned then gives
// back, and hold it for nobody meanwhile. Nor does a ctx that ends before
// its batch is taken (takeLocked).
func (c *combiner[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	if err := ctx.Err(); err != nil {
		var zero Res
		return zero, err
	}
	p := &combined[Req, Res]{req: req, ctx: ctx, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	c.waiting++
	start := c.inFlight < c.maxInFlight
	if start {
		c.inFlight++
	}
	c.mu.Unlock()
	if start {
		c.start(p)
	}
	select {
	case <-p.done:
		return p.answer()
	case <-ctx.Done():
	}
	// Leaving: unless the result is already here, the batch hands what the
	// request was granted to abandoned, and a request not sent yet never is.
	p.mu.Lock()
	if p.delivered {
		p.mu.Unlock()
		return p.answer()
	}
	p.gone = true
	taken := p.taken
	p.mu.Unlock()
	if !taken {
		c.leftUnsent()
	}
	var zero Res
	return zero, ctx.Err()
}

// leftUnsent counts a caller who left while its request was queued, and
// drops such requests from the queue once they are most of it. takeLocked
// skips them anyway, but behind a statement that stays stuck (one of its
// callers has no deadline) the queue would otherwise grow with every
// caller who came and left meanwhile. Dropping them all at once keeps the
// cost per caller constant.
func (c *combiner[Req, Res]) leftUnsent() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left++
	c.waiting--
	if c.left < minCompaction || 2*c.left < len(c.queue) {
		return
	}
	kept := c.queue[:0]
	for _, p := range c.queue {
		p.mu.Lock()
		gone := p.gone
		p.mu.Unlock()
		if !gone {
			kept = append(kept, p)
		}
	}
	clear(c.queue[len(kept):])
	c.queue, c.left = kept, 0
}

// minCompaction is how many callers must have left unsent before the queue
// is compacted.
const minCompaction = 64

// answer is what p's caller gets once its result is here. A caller whose
// context ended before the result came gets its own context's error, as
// a caller who leaves before the answer does: what it was granted went to
// abandoned (deliver). So does one whose statement failed after its
// context ended (cancelled, say, once every caller had left).
func (p *combined[Req, Res]) answer() (Res, error) {
	if p.gone || (p.err != nil && p.ctx.Err() != nil) {
		var zero Res
		return zero, p.ctx.Err()
	}
	return p.res, p.err
}

// releaseDone ends one of what releasing counts: an abandoned call, a
// detached batch (leave) now answered, whose grants to callers who left
// went to abandoned (counted apart), or the run again of a rejected batch.
func (c *combiner[Req, Res]) releaseDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releasing--
	c.settledLocked()
}

// deliver answers p's caller. What was granted to a caller who left first
// (gone, or its context ended while it ran the statement itself) goes to
// abandoned, and the caller gets its context's error (answer).
func (c *combiner[Req, Res]) deliver(p *combined[Req, Res], res Res, err error) {
	p.mu.Lock()
	p.res, p.err = res, err
	if p.ctx.Err() != nil {
		p.gone = true
	}
	gone := p.gone
	p.delivered = true
	close(p.done)
	p.mu.Unlock()
	if !gone || err != nil || c.abandoned == nil {
		return
	}
	c.mu.Lock()
	c.releasing++ // before this batch's place is given back: drain sees it
	c.mu.Unlock()
	c.gives.add(res)
}
