package ratelimit

import "sync"

// backlog runs jobs off their callers' goroutines, on at most most
// goroutines at once, oldest first: the give-backs of what nobody holds
// (giveBackUnheld, and the combiner's abandoned). A goroutine each, with
// no bound, piled up in a storm of callers leaving behind give-backs that
// were slow (their statements behind a lock, or retried while the
// database was unreachable), each a stack, each statement on a connection
// of the pool taken from the live calls. A job waiting its turn holds
// nothing but its slot in the queue; the give-backs time their tries from
// when they were handed over, not from when their turn came (retryUnheld).
//
// A counter under a lock rather than a sync.WaitGroup: a job may be added
// while wait waits, when none is pending too (an Add from zero, which a
// WaitGroup forbids during its Wait), and wait then waits for it.
type backlog[T any] struct {
	run  func(T)
	most int

	mu      sync.Mutex
	queue   []T // oldest first, waiting for a worker
	workers int // goroutines running jobs
	pending int // jobs queued or running
	idle    *sync.Cond
}

func newBacklog[T any](most int, run func(T)) *backlog[T] {
	b := &backlog[T]{run: run, most: max(most, 1)}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// add queues job, and starts a worker for it unless most run already.
func (b *backlog[T]) add(job T) {
	b.mu.Lock()
	b.pending++
	b.queue = append(b.queue, job)
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
		job := b.queue[0]
		var zero T
		b.queue[0] = zero // the array must not keep it
		b.queue = b.queue[1:]
		if len(b.queue) == 0 {
			b.queue = nil
		}
		b.mu.Unlock()
		b.run(job)
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
