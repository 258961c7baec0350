package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
	busy      time.Duration // their time from send to answer, summed
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

// maxJoinYields bounds how many times a batch about to be sent yields for
// callers to join it.
const maxJoinYields = 8

// nextBatch takes the next batch for an in-flight place; when there is
// none, it gives the place back and returns nil.
func (c *combiner[Req, Res]) nextBatch() []*combined[Req, Res] {
	c.mu.Lock()
	defer c.mu.Unlock()
	batch := c.takeLocked()
	if len(batch) == 0 {
		c.inFlight--
		c.settledLocked()
		return nil
	}
	return batch
}

// takeLocked removes the next batch from the queue: requests whose caller
// is still waiting, in arrival order, up to maxBatch, and up to maxWeight
// when requests are weighed. A request whose ctx has ended is left out
// even if its caller has not yet run to withdraw it (gone): it is never
// sent, and its caller, woken by the ctx, gets the ctx's error (do). Sent,
// it would hold what it was granted for nobody until abandoned gave it
// back. (ctx.Err of a context package's ctx is an atomic load.)
func (c *combiner[Req, Res]) takeLocked() []*combined[Req, Res] {
	var batch []*combined[Req, Res]
	n, weight := 0, 0
	for n < len(c.queue) && len(batch) < c.maxBatch {
		p := c.queue[n]
		p.mu.Lock()
		if p.gone {
			c.left-- // counted as its caller left (leftUnsent), no longer queued
		} else if p.ctx.Err() != nil {
			p.taken = true // its caller, withdrawing it, does not count it in left
			c.waiting--    // nor as waiting
		} else {
			w := 0
			if c.weight != nil {
				w = c.weight(p.req)
			}
			if len(batch) > 0 && weight+w > c.maxWeight {
				p.mu.Unlock()
				break // p goes first in the next batch
			}
			weight += w
			p.taken = true
			batch = append(batch, p)
		}
		p.mu.Unlock()
		n++
	}
	if n == len(c.queue) {
		c.queue, c.left = nil, 0 // the array goes with what it held
		return batch
	}
	// Requests stay queued behind those taken: the array stays, and its
	// slots before them would keep what was taken (each caller's ctx,
	// request and result) until the queue empties or outgrows it.
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	return batch
}

// start sends the next batch for p's caller, who took an in-flight place,
// once the callers woken with it have joined (awaitJoiners). A caller alone
// in its batch runs the statement on its own goroutine, with no handoff to
// another (no added latency); if its context ends meanwhile, it leaves
// once the statement is answered (or cancelled leftGrace later: see
// sendContext), and what it was granted goes to abandoned. A batch of
// several runs on a goroutine of its own, so that each of its callers can
// leave when its context ends, even while another one in it has no
// deadline.
func (c *combiner[Req, Res]) start(p *combined[Req, Res]) {
	c.awaitJoiners()
	batch := c.nextBatch()
	switch {
	case len(batch) == 1 && batch[0] == p:
		if c.runBatch(batch, true) {
			return // its in-flight place went to the queue when its caller left
		}
		if !c.releaseIfIdle() {
			go c.flushQueued()
		}
	case batch != nil:
		go c.stream(batch)
	}
}

// releaseIfIdle gives the in-flight place back when nothing is queued.
func (c *combiner[Req, Res]) releaseIfIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		return false
	}
	c.inFlight--
	c.settledLocked()
	return true
}

// flushQueued sends the queue as a stream's next batch, once the callers
// about to join it have.
func (c *combiner[Req, Res]) flushQueued() {
	c.awaitJoiners()
	c.stream(c.nextBatch())
}

// stream holds one in-flight place: it runs batch, then the queue, batch
// after batch, until it finds it empty. Each batch goes once the callers
// about to join it have (awaitJoiners): those that the batches ending now
// answered, of this stream and the other, come back within microseconds,
// and would otherwise wait for the whole of the next statement. With 16
// callers alternating between Reserve and Commit this took the batches from
// 5.8 to 7.2 calls and the admissions per second up 10-15 %.
func (c *combiner[Req, Res]) stream(batch []*combined[Req, Res]) {
	for batch != nil {
		if c.runBatch(batch, true) {
			return // the place went to the queue when every caller left
		}
		c.awaitJoiners()
		batch = c.nextBatch()
	}
}

// awaitJoiners yields the processor while the queue grows, at most
// maxJoinYields times: well under a microsecond when nothing else is
// runnable.
func (c *combiner[Req, Res]) awaitJoiners() {
	queued := 0
	for range maxJoinYields {
		c.mu.Lock()
		n := len(c.queue)
		c.mu.Unlock()
		if n <= queued {
			break
		}
		queued = n
		runtime.Gosched()
	}
}

// runBatch runs one batch and delivers each result. A batch of several
// that the server rejected as a whole for what it was sent (one request's
// bad input, say) is run again one request at a time, so that only the
// request at fault fails; a request whose caller has left by then is not
// sent again (it was rolled back with the batch), and its caller gets its
// context's error.
//
// holdsPlace says the batch runs on an in-flight place. It reports whether
// the batch gave the place up because every caller in it had left before
// the answer (leave): the caller of runBatch then no longer holds it.
func (c *combiner[Req, Res]) runBatch(batch []*combined[Req, Res], holdsPlace bool) (detached bool) {
	if len(batch) == 0 {
		return false
	}
	ctx, f, cancel := c.sendContext(batch, holdsPlace)
	defer cancel()
	reqs := make([]Req, len(batch))
	for i, p := range batch {
		reqs[i] = p.req
	}
	var hot atomic.Bool
	ctx = context.WithValue(ctx, hotMarkKey{}, &hot)
	ctx = withCallers(ctx, func() bool { return allWait(batch) })
	sent := time.Now()
	res, errs, err := c.runGuarded(ctx, reqs)
	rerun := err != nil && len(batch) > 1 && rejectedInput(err)
	answeredCalls := len(batch)
	if rerun {
		answeredCalls = 0 // they wait on, for a statement each
	}
	detached = c.answered(f, len(batch), answeredCalls, time.Since(sent), hot.Load())
	if detached {
		defer c.releaseDone()
	}
	if rerun {
		// The run again counts as releasing until its last request is
		// answered: once one of them gives the batch's place up (leave),
		// the others run on none, and drain must still wait for them and
		// for what they grant callers who leave meanwhile.
		c.mu.Lock()
		c.releasing++
		c.mu.Unlock()
		defer c.releaseDone()
		for _, p := range batch {
			if p.ctx.Err() != nil {
				// Its caller left: the statement was rolled back, so the
				// request is withdrawn, as one not yet sent is. Sent again,
				// it would hold capacity that the requests after it may
				// need until its grant is released as abandoned.
				c.mu.Lock()
				c.waiting--
				c.mu.Unlock()
				c.deliver(p, *new(Res), p.ctx.Err())
				continue
			}
			if c.runBatch([]*combined[Req, Res]{p}, holdsPlace && !detached) {
				detached = true
			}
		}
		return detached
	}
	for i, p := range batch {
		if err != nil {
			c.deliver(p, *new(Res), err)
		} else {
			c.deliver(p, res[i], errs[i])
		}
	}
	return detached
}

// allWait reports whether every caller in batch still waits (its
// context has not ended): a statement of the batch that failed unsent is
// sent again only then (resendsUnsent).
func allWait[Req, Res any](batch []*combined[Req, Res]) bool {
	for _, p := range batch {
		if p.ctx.Err() != nil {
			return false
		}
	}
	return true
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

// hotMarkKey keys, in the context a combined statement runs with, the flag
// that markHot sets.
type hotMarkKey struct{}

// markHot tells the combiner running ctx's statement that it went as a hot
// batch, so that answered counts it with the statement, under one lock: a
// Stats read between the two used to see more hot statements than
// statements. A statement run outside a combiner is counted nowhere.
func markHot(ctx context.Context) {
	if hot, ok := ctx.Value(hotMarkKey{}).(*atomic.Bool); ok {
		hot.Store(true)
	}
}

// answered records a statement of n requests, answered after took, hot if
// it went as a hot batch (a statement counts once answered, so that Busy,
// Hot and Batches always describe the same statements), of which done no
// longer wait (all of them, or none when they go again alone: runBatch),
// and closes f: its callers leaving no longer detaches it. It reports
// whether f was detached before.
func (c *combiner[Req, Res]) answered(f *flight, n, done int, took time.Duration, hot bool) (detached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	c.requests += int64(n)
	c.waiting -= int64(done)
	c.busy += took
	if hot {
		c.hot++
	}
	if f == nil {
		return false
	}
	f.answered = true
	return f.detached
}

// runGuarded runs a batch, turning a panic into an error for the whole
// batch: its callers, who may be waiting on other goroutines, are answered,
// and the stream goes on with the next batch instead of stalling for good.
func (c *combiner[Req, Res]) runGuarded(ctx context.Context, reqs []Req) (res []Res, errs []error, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, errs, err = nil, nil, fmt.Errorf("ratelimit: a combined batch panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return c.run(ctx, reqs)
}

// rejectedInput reports an error the server raised about what a statement
// was sent: a data exception (class 22), a constraint it broke (23), an
// access rule (42) or a PL/pgSQL RAISE (P0). Such an error rolled the
// statement back whole. Any other, such as a cancellation (57014), may
// have come after the statement committed (a hot batch's commit, a lost
// connection), when sending its requests again would admit them twice.
func rejectedInput(err error) bool {
	var unconfirmed *unconfirmedError
	if errors.As(err, &unconfirmed) {
		return false // a hot batch that may have committed (hotRows)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "42", "P0":
		return true
	}
	return false
}

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

// CombinerStats counts what one kind of operation sent since the Limiter
// was made: Batches statements carried Requests calls, Hot of them
// batches on a hot counter or concurrency scope (two calls drawing on
// one), which release its row or lock before their commit's flush and
// answer after it. Busy is the statements' time from send to answer,
// summed: encoding, the round trip, the server's work and the commit's
// flush, and decoding the answer. With one statement in flight, Busy over
// the time elapsed is the share of it the stream was busy; the rest it
// waited for callers. A statement counts once it returns, answered or
// failed (cancelled on a database that does not answer, say, or never sent
// for want of a connection). Each counts the calls it carried: a call
// whose batch the server rejected for another call's input is sent again
// alone (runBatch), and counts with both statements. Waiting, a gauge, is
// the calls that wait in the combiner now.
type CombinerStats struct {
	// Batches counts the statements sent.
	Batches int64
	// Requests counts the calls those statements carried.
	Requests int64
	// Hot counts, of Batches, those on a hot counter or concurrency scope.
	Hot int64
	// Busy is the statements' time from send to answer, summed.
	Busy time.Duration
	// Waiting is a gauge, not a count: the calls in the combiner now,
	// those queued for its next statement and those that the statements
	// in flight carry. A call counts from when it queued until its
	// statement returns; a call sent again alone, after the server
	// rejected its batch for another call's input, until its own
	// statement returns. One whose caller left while it was queued stops
	// counting as it is withdrawn (its caller returns, or the next batch
	// is taken without it); one whose caller left after it was sent
	// counts until its statement returns (what it was granted is then
	// given back). A call outside the combiner (inside a caller's
	// transaction, on one connection, without combining, a Commit or
	// Release of more reservations and leases than a statement takes, or
	// one that needs no statement) never counts. Sub keeps the later
	// reading's; Add sums them.
	Waiting int64
}

// MeanBatch is how many calls one statement carried on average (zero
// before any statement was counted).
func (s CombinerStats) MeanBatch() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.Batches)
}

// MeanStatement is how long one statement took from send to answer on
// average (zero before any was answered).
func (s CombinerStats) MeanStatement() time.Duration {
	if s.Batches == 0 {
		return 0
	}
	return s.Busy / time.Duration(s.Batches)
}

// Sub is what was counted between an earlier reading, before, and s.
func (s CombinerStats) Sub(before CombinerStats) CombinerStats {
	return CombinerStats{
		Batches:  s.Batches - before.Batches,
		Requests: s.Requests - before.Requests,
		Hot:      s.Hot - before.Hot,
		Busy:     s.Busy - before.Busy,
		Waiting:  s.Waiting, // a gauge: now's
	}
}

// Add is the sum of two counts, of two Limiters say.
func (s CombinerStats) Add(t CombinerStats) CombinerStats {
	return CombinerStats{
		Batches:  s.Batches + t.Batches,
		Requests: s.Requests + t.Requests,
		Hot:      s.Hot + t.Hot,
		Busy:     s.Busy + t.Busy,
		Waiting:  s.Waiting + t.Waiting,
	}
}

// givesWaiting is how many results wait their turn to be given back
// (gives), 0 for a nil combiner.
func (c *combiner[Req, Res]) givesWaiting() int {
	if c == nil {
		return 0
	}
	return c.gives.waiting()
}

func (c *combiner[Req, Res]) stats() CombinerStats {
	if c == nil {
		return CombinerStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CombinerStats{Batches: c.batches, Requests: c.requests, Hot: c.hot, Busy: c.busy, Waiting: c.waiting}
}

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
