package ratelimit

import (
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
	b := newBacklog(most, func(j int) {
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
	// The first most start in any order, each worker then takes the oldest.
	seen := map[int]bool{}
	for i, j := range ran {
		if seen[j] {
			t.Errorf("job %d ran twice", j)
		}
		seen[j] = true
		if i >= most && j < i-most+1 {
			t.Errorf("job %d ran %dth: out of order %v", j, i, ran)
		}
	}
	mu.Unlock()

	// Added while wait waits: waited for too.
	block := make(chan struct{})
	b2 := newBacklog(1, func(j int) { <-block })
	b2.add(1)
	waited = make(chan struct{})
	go func() { b2.wait(); close(waited) }()
	b2.add(2)
	close(block)
	<-waited
	b2.mu.Lock()
	if b2.pending != 0 || b2.workers != 0 || b2.queue != nil {
		t.Errorf("after wait: %d pending, %d workers, queue %v", b2.pending, b2.workers, b2.queue)
	}
	b2.mu.Unlock()
}
