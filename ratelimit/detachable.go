package ratelimit

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// runDetachable is runToAnswer for a caller who can leave, on a pool: op
// runs in statementContext on a goroutine of its own, counted with the
// give-backs (Limiter.Close waits for it), and the caller returns when it
// is answered or as soon as ctx ends, whichever comes first. A statement
// its caller left runs on without it: cancelled grace after ctx ended if
// still unanswered and, on a pool set up with ConfigurePool, waiting for
// the cancel's acknowledgement (up to 1 s) and the statement's answer,
// which the caller used to wait for too; what it obtained then goes to
// abandon on that goroutine.
func runDetachable[T any](l *Limiter, ctx context.Context, op func(context.Context) (T, error), abandon func(T)) (T, error) {
	r := &detached[T]{done: make(chan struct{})}
	l.unheld.goGiveBack(func() {
		res, err := runRecovered(ctx, l.opts.leftGrace, op)
		if r.deliver(ctx, res, err) && err == nil {
			abandon(res)
		}
	})
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	if r.take() {
		return r.res, r.err
	}
	var zero T
	return zero, ctx.Err()
}

// detached is the answer of a statement run by runDetachable, handed to
// its caller unless the caller left first.
type detached[T any] struct {
	mu   sync.Mutex
	res  T
	err  error
	gone bool // the caller left before the answer: it gets ctx's error, and what was obtained is abandoned
	done chan struct{}
}

// deliver records the answer and reports whether nobody takes it: the
// caller left, or its ctx ended before the answer came (as runToAnswer
// counts a caller whose ctx ended while the statement ran).
func (r *detached[T]) deliver(ctx context.Context, res T, err error) (gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		r.gone = true
	}
	if !r.gone {
		r.res, r.err = res, err
	}
	close(r.done)
	return r.gone
}

// take reports whether the caller has the answer (res and err, no longer
// written once it returns); the caller who has not, its ctx over, leaves.
func (r *detached[T]) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
	default:
		r.gone = true
	}
	return !r.gone
}

// runRecovered runs op in statementContext, turning a panic into an error
// for its caller: off the caller's goroutine, a panic would end the
// process instead of reaching the caller (as runGuarded does for a
// combined batch).
func runRecovered[T any](ctx context.Context, grace time.Duration, op func(context.Context) (T, error)) (res T, err error) {
	sctx, cancel := statementContext(ctx, grace)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			var zero T
			res, err = zero, fmt.Errorf("ratelimit: a statement panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return op(sctx)
}
