package ratelimit_test

import (
	"sync"
	"time"
)

// atOnce counts how many give-backs run at once, held up: its hook (for
// WithUnheldTryHook) holds each try until hold is closed.
type atOnce struct {
	hold <-chan struct{}

	mu            sync.Mutex
	holding, most int
}

func (a *atOnce) hook() {
	a.mu.Lock()
	a.holding++
	a.most = max(a.most, a.holding)
	a.mu.Unlock()
	<-a.hold
	a.mu.Lock()
	a.holding--
	a.mu.Unlock()
}

// awaitHolding waits until bound tries are held up (10 s at most), and
// 20 ms more: more would start by then.
func (a *atOnce) awaitHolding(bound int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		a.mu.Lock()
		h := a.holding
		a.mu.Unlock()
		if h >= bound {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
}

// mostAtOnce is how many tries were held up at once, at most.
func (a *atOnce) mostAtOnce() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.most
}
