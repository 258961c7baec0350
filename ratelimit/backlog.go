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
// A counter under a lock rather than a sync.WaitGroup: a job may be added
// while wait waits, when none is pending too (an Add from zero, which a
// WaitGroup forbids during its Wait), and wait then waits for it.
type backlog[T any] struct {
	run  func(job T, added time.Time)
	most int

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

func newBacklog[T any](most int, run func(T, time.Time)) *backlog[T] {
	b := &backlog[T]{run: run, most: max(most, 1)}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// add queues job, and starts a worker for it unless most run already.
func (b *backlog[T]) add(job T) {
	b.mu.Lock()
	b.pending++
	b.queue = append(b.queue, queued[T]{job, time.Now()})
	start := b.workers < b.most
	if start {
		b.workers++
	}
	b.mu.Unlock()
	if start {
		go b.work()
	}
}

// work runs the queued jobs, one after the other, until none is left.
func (b *backlog[T]) work() {
	b.mu.Lock()
	for len(b.queue) > 0 {
		q := b.queue[0]
		b.queue[0] = queued[T]{} // the array must not keep it
		b.queue = b.queue[1:]
		if len(b.queue) == 0 {
			b.queue = nil
		}
		b.mu.Unlock()
		b.run(q.job, q.added)
		b.mu.Lock()
		b.pending--
		if b.pending == 0 {
			b.idle.Broadcast()
		}
	}
	b.workers--
	b.mu.Unlock()
}

// wait returns once no job is queued or runs.
func (b *backlog[T]) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pending > 0 {
		b.idle.Wait()
	}
}
