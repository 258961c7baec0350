package ratelimit

import (
	"sync"
	"time"
)

// backlog runs jobs off their callers' goroutines, on at most most
// goroutines at once, oldest first: the give-backs of what nobody holds
// (giveBackUnheld, and the combiner's abandoned). A goroutine each, with
// no bound, piled up in a storm of callers leaving behind give-backs that
// were slow (their statements behind a lock, or retried while the
// database was unreachable), each a stack, each statement on a connection
// of the pool taken from the live calls. A job waiting its turn holds
// nothing but its slot in the queue, and run is told when it was added:
// the give-backs time their tries from then, not from when their turn
// came (retryUnheld).
//
// The queue keeps queuedAtMost(most) jobs: one added beyond them drops
// the oldest waiting, which drop is told of (the give-backs count it as
// dropped, Stats.GiveBacksDropped, and lost, Stats.Lost, as one whose
// tries ran out): its turn would have come late in its span, if at all.
// waiting says how many wait now (Stats.GiveBacksWaiting).
//
// A counter under a lock rather than a sync.WaitGroup: a job may be added
// while wait waits, when none is pending too (an Add from zero, which a
// WaitGroup forbids during its Wait), and wait then waits for it.
type backlog[T any] struct {
	run       func(job T, added time.Time)
	drop      func(job T, added time.Time) // a job that waited beyond maxQueued
	most      int
	maxQueued int

	mu      sync.Mutex
	queue   []queued[T] // oldest first, waiting for a worker
	workers int         // goroutines running jobs
	pending int         // jobs queued or running
	idle    *sync.Cond
}

// queued is a job and when it was added.
type queued[T any] struct {
	job   T
	added time.Time
}

func newBacklog[T any](most int, run, drop func(T, time.Time)) *backlog[T] {
	b := &backlog[T]{run: run, drop: drop, most: max(most, 1), maxQueued: queuedAtMost(most)}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// add queues job, and starts a worker for it unless most run already.
// With maxQueued waiting already, the oldest of them is dropped; it
// counts as pending until drop returned, so that wait waits for it too.
func (b *backlog[T]) add(job T) {
	b.mu.Lock()
	b.pending++
	b.queue = append(b.queue, queued[T]{job, time.Now()})
	var old queued[T]
	over := len(b.queue) > b.maxQueued
	if over {
		old = b.pop()
	}
	start := b.workers < b.most
	if start {
		b.workers++
	}
	b.mu.Unlock()
	if start {
		go b.work()
	}
	if over {
		b.drop(old.job, old.added)
		b.mu.Lock()
		b.doneLocked()
		b.mu.Unlock()
	}
}

// addAfter adds job once wait returns, which it calls on a goroutine of
// its own that holds no worker: a job that must wait for something first
// keeps no other from its turn meanwhile. It is pending from now, so that
// the backlog's wait waits for it too.
func (b *backlog[T]) addAfter(wait func(), job T) {
	b.mu.Lock()
	b.pending++
	b.mu.Unlock()
	go func() {
		wait()
		b.add(job) // pending once more before this wait is done: never 0 between
		b.mu.Lock()
		b.doneLocked()
		b.mu.Unlock()
	}()
}

// pop takes the oldest job off the queue. Under mu.
func (b *backlog[T]) pop() queued[T] {
	q := b.queue[0]
	b.queue[0] = queued[T]{} // the array must not keep it
	b.queue = b.queue[1:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return q
}

// doneLocked ends a pending job: run or dropped. Under mu.
func (b *backlog[T]) doneLocked() {
	b.pending--
	if b.pending == 0 {
		b.idle.Broadcast()
	}
}

// work runs the queued jobs, one after the other, until none is left.
func (b *backlog[T]) work() {
	b.mu.Lock()
	for len(b.queue) > 0 {
		q := b.pop()
		b.mu.Unlock()
		b.run(q.job, q.added)
		b.mu.Lock()
		b.doneLocked()
	}
	b.workers--
	b.mu.Unlock()
}

// waiting is how many jobs are queued now, waiting for a worker. Zero for
// a nil backlog (none: on a single connection, in a transaction, or a
// combiner that gives nothing back).
func (b *backlog[T]) waiting() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// wait returns once no job is queued or runs.
func (b *backlog[T]) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pending > 0 {
		b.idle.Wait()
	}
}

// queuedAtMost is how many jobs a backlog of most workers keeps waiting
// their turn: a job added beyond it drops the oldest waiting (see add).
// A give-back's tries are timed from its hand-over (retryUnheld), so one
// that would start more than unheldReleaseSpan after it was added tries
// once, past its span, and with the database unreachable fails: at a
// give-back every backlogTurn at best per worker (a database slow enough
// for them to pile up), a queue of most × unheldReleaseSpan/backlogTurn
// is as much as starts within the span. Beyond it, entries only hold
// memory (a closure and its grant each), piling up while the database
// answers Reserves and not the give-backs, until their 30 s run out.
// queuedCeiling caps it for a backlog of many workers.
func queuedAtMost(most int) int {
	perWorker := int(unheldReleaseSpan / backlogTurn)
	if most >= queuedCeiling/perWorker {
		return queuedCeiling
	}
	return max(most, 1) * perWorker
}

const (
	// backlogTurn is the least time queuedAtMost reckons a give-back's turn
	// takes on a worker, once they queue.
	backlogTurn = 10 * time.Millisecond
	// queuedCeiling bounds queuedAtMost: 64 Ki waiting give-backs, some
	// tens of MB at most (a grant of a few reservations each).
	queuedCeiling = 1 << 16
)
