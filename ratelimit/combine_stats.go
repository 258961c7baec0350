package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

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

// CombinerStats counts what one kind of operation sent since the Limiter
// was made: Batches statements carried Requests calls, Hot of them
// batches on a hot counter or concurrency scope (two calls drawing on
// one), which release its row or lock before their commit's flush and
// answer after it. Busy is the statements' time, summed, from when each
// went to take a pool connection to its answer: the wait for that
// connection, encoding, the round trip, the server's work and the commit's
// flush (a hot batch's commit procedure too), decoding the answer, and
// a second send of a statement that its connection, found closed, never
// sent. A pool too small for the traffic so shows as slow statements
// (promadmit's pool metrics tell the two apart). With one statement in
// flight, Busy over the time elapsed is the share of it the stream was
// busy, waits for a connection included; the rest it waited for callers. A statement counts once it returns, answered or
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
	// Busy is the statements' time from taking a pool connection (their
	// wait for one included) to the answer, summed.
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

// MeanStatement is how long one statement took on average, from taking a
// pool connection (its wait for one included) to its answer: Busy over
// Batches (zero before any was answered).
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
