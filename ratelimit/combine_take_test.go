package ratelimit

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// endsAfterCheck is a context that ends just after its first Err check
// said it had not: a deadline that passes, or a cancel that lands, between
// do's own check and the taking of the caller's batch.
type endsAfterCheck struct {
	context.Context
	cancel  context.CancelFunc
	checked atomic.Bool
}

func newEndsAfterCheck() *endsAfterCheck {
	ctx, cancel := context.WithCancel(context.Background())
	return &endsAfterCheck{Context: ctx, cancel: cancel}
}

func (c *endsAfterCheck) Err() error {
	err := c.Context.Err()
	if c.checked.CompareAndSwap(false, true) {
		c.cancel()
	}
	return err
}

// A caller whose ctx ends after do checked it, before its batch is taken
// (while the caller that took an in-flight place waits for joiners, say),
// is left out of the batch: nothing is sent for it, and it gets its ctx's
// error. It was sent with the ctx's cancellation stripped, and what it was
// granted went to abandoned, held for nobody until given back.
func TestCombinerLeavesOutACallerWhoseCtxEndedBeforeItsBatchWasTaken(t *testing.T) {
	var sent [][]int
	c := newCombiner(8, 1, func(_ context.Context, reqs []int) ([]int, []error, error) {
		sent = append(sent, slices.Clone(reqs))
		return slices.Clone(reqs), make([]error, len(reqs)), nil
	}, func(res int, _ time.Time) { t.Errorf("request %d granted and abandoned", res) })
	if _, err := c.do(newEndsAfterCheck(), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("do: %v, want context.Canceled", err)
	}
	c.drain()
	if len(sent) != 0 {
		t.Errorf("sent %v, want nothing", sent)
	}
	if s := c.stats(); s.Batches != 0 || s.Requests != 0 {
		t.Errorf("stats %+v, want no statement", s)
	}
	if res, err := c.do(context.Background(), 2); err != nil || res != 2 {
		t.Fatalf("the next call: %d, %v", res, err)
	}
	if len(sent) != 1 || !slices.Equal(sent[0], []int{2}) {
		t.Errorf("sent %v, want [[2]]", sent)
	}
}

// A queued caller whose ctx has ended when the next batch is taken, though
// its goroutine has not run since to withdraw its request (it is not
// marked gone), is left out of the batch, and no longer counts as waiting;
// the callers queued around it go.
func TestCombinerNextBatchLeavesOutAnEndedCallerNotYetGone(t *testing.T) {
	g := newGate()
	abandoned := make(chan int, 4)
	c := newCombiner(8, 1, g.run, func(res int, _ time.Time) { abandoned <- res })
	errs := make(chan error, 3)
	call := func(n int) { _, err := c.do(context.Background(), n); errs <- err }
	go call(1)
	<-g.started
	go call(2)
	waitQueued(t, c, 1)
	ended, end := context.WithCancel(context.Background())
	end()
	// As do queues it, with no goroutine waiting on it yet.
	c.mu.Lock()
	c.queue = append(c.queue, &combined[int, int]{req: 3, ctx: ended, done: make(chan struct{})})
	c.waiting++
	c.mu.Unlock()
	go call(4)
	waitQueued(t, c, 3)
	wantWaiting(t, c, 4, "[1] in flight, 2, 3 and 4 queued")
	g.release <- struct{}{} // [1] ends; the next batch is taken
	if next := <-g.started; !slices.Equal(next, []int{2, 4}) {
		t.Fatalf("next batch %v, want [2 4] (3's ctx had ended)", next)
	}
	wantWaiting(t, c, 2, "[2 4] in flight, 3 left out")
	g.release <- struct{}{}
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	c.drain()
	select {
	case res := <-abandoned:
		t.Errorf("abandoned %d, want nothing", res)
	default:
	}
	if s := c.stats(); s.Batches != 2 || s.Requests != 3 || s.Waiting != 0 {
		t.Errorf("stats %+v, want 2 statements of 3 requests, none waiting", s)
	}
}

// The requests that takeLocked takes off the queue, sent or left out, are
// no longer referenced by the queue's array: the queue reslices past them,
// and its array (kept while requests stay queued behind them) used to hold
// every caller of a burst, its ctx, request and result, until the queue
// next emptied or outgrew it.
func TestCombinerTakeLetsGoOfWhatItTakes(t *testing.T) {
	c := newCombiner(2, 1, func(context.Context, []int) ([]int, []error, error) { return nil, nil, nil }, nil)
	ended, end := context.WithCancel(context.Background())
	end()
	queued := func(req int, ctx context.Context, gone bool) *combined[int, int] {
		return &combined[int, int]{req: req, ctx: ctx, done: make(chan struct{}), gone: gone}
	}
	live := context.Background()
	c.queue = []*combined[int, int]{queued(1, live, false), queued(2, live, true), queued(3, ended, false), queued(4, live, false), queued(5, live, false)}
	array := c.queue[:cap(c.queue)]
	c.mu.Lock()
	batch := c.takeLocked()
	c.mu.Unlock()
	if len(batch) != 2 || batch[0].req != 1 || batch[1].req != 4 {
		t.Fatalf("took %d requests, want 1 and 4", len(batch))
	}
	if len(c.queue) != 1 || c.queue[0].req != 5 {
		t.Fatalf("%d queued, want 5 alone", len(c.queue))
	}
	for i, p := range array[:4] {
		if p != nil {
			t.Errorf("slot %d of the queue's array still holds request %d, taken", i, p.req)
		}
	}
	if array[4] == nil || array[4].req != 5 {
		t.Errorf("slot 4 of the queue's array: %v, want request 5, still queued", array[4])
	}
}

// endedUnseen is a context that reports it ended (Err) before its Done
// closes: a deadline past, seen by takeLocked before the runtime woke the
// caller waiting on Done.
type endedUnseen struct {
	context.Context
	ended atomic.Bool
}

func (c *endedUnseen) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

// left counts the callers gone whose requests are still queued, which is
// what leftUnsent weighs against the queue's length to decide to compact
// it. A request that takeLocked drops, its caller gone or its ctx ended
// (its caller withdrawing it later), is no longer queued: left counted it
// all the same, until the queue next emptied, and compacted a long queue
// under the combiner's lock when few of it, or none, had gone.
func TestCombinerLeftCountsOnlyWhatIsStillQueued(t *testing.T) {
	g := newGate()
	c := newCombiner(1, 1, g.run, func(int, time.Time) {})
	var errs [6]chan error
	call := func(ctx context.Context, n int) {
		errs[n] = make(chan error, 1)
		go func() { _, err := c.do(ctx, n); errs[n] <- err }()
	}
	call(context.Background(), 1)
	<-g.started
	unseen := &endedUnseen{}
	var endUnseen context.CancelFunc
	unseen.Context, endUnseen = context.WithCancel(context.Background())
	defer endUnseen()
	call(unseen, 2)
	waitQueued(t, c, 1)
	leaving, leave := context.WithCancel(context.Background())
	call(leaving, 3)
	waitQueued(t, c, 2)
	call(context.Background(), 4)
	waitQueued(t, c, 3)
	call(context.Background(), 5)
	waitQueued(t, c, 4)
	leave()
	if err := <-errs[3]; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller who left: %v", err)
	}
	unseen.ended.Store(true)
	g.release <- struct{}{} // [1] is answered; the next batch leaves 2 and 3 out
	if next := <-g.started; !slices.Equal(next, []int{4}) {
		t.Fatalf("next batch %v, want [4]", next)
	}
	endUnseen() // 2's caller wakes and withdraws its request, taken already
	if err := <-errs[2]; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller whose ctx ended unseen: %v", err)
	}
	c.mu.Lock()
	left, queued := c.left, len(c.queue)
	c.mu.Unlock()
	if left != 0 || queued != 1 {
		t.Errorf("left %d with %d queued (5, waiting), want 0", left, queued)
	}
	g.release <- struct{}{}
	<-g.started
	g.release <- struct{}{}
	for _, n := range []int{1, 4, 5} {
		if err := <-errs[n]; err != nil {
			t.Errorf("call %d: %v", n, err)
		}
	}
	c.drain()
}
