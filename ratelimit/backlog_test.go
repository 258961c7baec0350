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
	})
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
	})
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
