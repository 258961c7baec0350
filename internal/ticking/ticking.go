// Package ticking runs a function at an interval in the background until stopped.
package ticking

import (
	"sync"
	"time"
)

// Every calls do every interval, on a goroutine of its own, until the returned stop is
// called; stop returns once do no longer runs, so that nothing do does happens after it (a
// progress line written, a heartbeat sent). A call of do that outlasts an interval delays the
// next; none overlap.
func Every(interval time.Duration, do func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				do()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
