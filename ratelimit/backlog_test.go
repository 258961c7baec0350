package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A backlog runs its jobs on at most most goroutines at once, oldest
// first, each once; wait returns only once the last has returned, a job
// added while it waits included.
func TestBacklogRunsJobsBoundedInOrderAndWaitWaitsForAll(t *testing.T) {
	const most, jobs = 3, 20
	var (
		mu            sync.Mutex
		running, peak int
		ran           []int
	)
	hold := make(chan struct{})
	noDrop := func(j int, _ time.Time) { t.Errorf("job %d dropped, under the queue's bound", j) }
	b := newBacklog(most, func(j int, _ time.Time) {
		mu.Lock()
		running++
		peak = max(peak, running)
		ran = append(ran, j)
		mu.Unlock()
		if j < jobs {
			<-hold
		}
		mu.Lock()
		running--
		mu.Unlock()
	}, noDrop)
	for j := range jobs {
		b.add(j)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		r := running
		mu.Unlock()
		if r == most {
			break
		}
	}
	time.Sleep(10 * time.Millisecond) // more would start now
	mu.Lock()
	if running != most || len(ran) != most {
		t.Errorf("%d jobs running, %d started, want %d (the bound)", running, len(ran), most)
	}
	mu.Unlock()
	waited := make(chan struct{})
	go func() { b.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while jobs were held")
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	<-waited
	mu.Lock()
	if peak != most || len(ran) != jobs || running != 0 {
		t.Errorf("%d jobs ran, %d at once at most, %d running after wait; want %d, %d, 0", len(ran), peak, running, jobs, most)
	}
	seen := map[int]bool{}
	for _, j := range ran {
		if seen[j] {
			t.Errorf("job %d ran twice", j)
		}
		seen[j] = true
	}
	mu.Unlock()

	// On one goroutine, oldest first; added while wait waits: waited for
	// too.
	block := make(chan struct{})
	var (
		order       []int
		added, runs []time.Time
	)
	b2 := newBacklog(1, func(j int, at time.Time) {
		<-block
		order = append(order, j) // one goroutine at a time: wait orders it before the reads below
		added, runs = append(added, at), append(runs, time.Now())
	}, noDrop)
	for j := range 5 {
		b2.add(j)
	}
	waited = make(chan struct{})
	go func() { b2.wait(); close(waited) }()
	time.Sleep(5 * time.Millisecond)
	b2.add(5)
	close(block)
	<-waited
	if fmt.Sprint(order) != "[0 1 2 3 4 5]" {
		t.Errorf("ran %v, want [0 1 2 3 4 5]: oldest first, and wait waited for the last", order)
	}
	// Each job is told when it was added, not when it ran: the last was
	// added 5 ms after the others, all of which waited for block.
	for i := range added {
		if i < 5 && runs[i].Sub(added[i]) < 5*time.Millisecond {
			t.Errorf("job %d told it was added %v before it ran, want the time it was added (5 ms or more before)", i, runs[i].Sub(added[i]))
		}
		if i > 0 && added[i].Before(added[i-1]) {
			t.Errorf("job %d added at %v, before job %d (%v)", i, added[i], i-1, added[i-1])
		}
	}
	if len(added) == 6 && added[5].Sub(added[4]) < 5*time.Millisecond {
		t.Errorf("the last job added %v after the one before, want the 5 ms the test slept between", added[5].Sub(added[4]))
	}
	b2.mu.Lock()
	if b2.pending != 0 || b2.queue != nil {
		t.Errorf("after wait: %d pending, queue %v", b2.pending, b2.queue)
	}
	b2.mu.Unlock()
}

// A backlog keeps queuedAtMost(most) jobs waiting: each one added beyond
// them drops the oldest waiting, which never runs and is handed to drop
// with when it was added (on add's goroutine, before add returns), and
// every other job runs, oldest first.
func TestBacklogDropsTheOldestWaitingBeyondItsBound(t *testing.T) {
	const over = 4
	bound := queuedAtMost(1)
	if bound != int(unheldReleaseSpan/backlogTurn) || queuedAtMost(1<<14) != queuedCeiling || queuedAtMost(0) != bound {
		t.Errorf("queuedAtMost: %d for one worker, %d for 1<<14, %d for none; want %d, %d, %d",
			bound, queuedAtMost(1<<14), queuedAtMost(0), int(unheldReleaseSpan/backlogTurn), queuedCeiling, bound)
	}
	var (
		mu      sync.Mutex
		ran     []int
		dropped []int
		added   []time.Time
	)
	started, hold := make(chan struct{}), make(chan struct{})
	b := newBacklog(1, func(j int, _ time.Time) {
		if j == 0 {
			close(started)
			<-hold
		}
		mu.Lock()
		ran = append(ran, j)
		mu.Unlock()
	}, func(j int, at time.Time) {
		mu.Lock()
		dropped, added = append(dropped, j), append(added, at)
		mu.Unlock()
	})
	b.add(0)
	<-started // the worker holds job 0: the others wait
	before := time.Now()
	for j := 1; j <= bound; j++ {
		b.add(j)
	}
	for j := bound + 1; j <= bound+over; j++ {
		b.add(j)
	}
	b.mu.Lock()
	if len(b.queue) != bound || b.pending != 1+bound {
		t.Errorf("%d queued, %d pending; want %d (the bound), %d", len(b.queue), b.pending, bound, 1+bound)
	}
	b.mu.Unlock()
	close(hold)
	b.wait()
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(dropped) != fmt.Sprint([]int{1, 2, 3, 4}) {
		t.Errorf("dropped %v, want [1 2 3 4]: the oldest waiting, once each", dropped)
	}
	for i, at := range added {
		if at.Before(before) {
			t.Errorf("drop %d told the job was added at %v, before it was (%v)", i, at, before)
		}
	}
	want := []int{0}
	for j := 1 + over; j <= bound+over; j++ {
		want = append(want, j)
	}
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("ran %d jobs %v, want the %d not dropped, oldest first", len(ran), ran, len(want))
	}
	if b.pending != 0 || b.queue != nil {
		t.Errorf("after wait: %d pending, %d queued", b.pending, len(b.queue))
	}
}
