// Package ticking runs a function at an interval in the background until stopped.
package ticking

import (
	"sync"
	"time"
)

// MinInterval is the shortest interval Every ticks at: a shorter one, zero or negative
// included, is taken as MinInterval. Every's callers have nowhere to report a bad interval
// (a lease heartbeat every third of a TTL, progress lines), time.NewTicker panics on a
// non-positive one (on Every's goroutine, where nothing can recover it: the process dies),
// and a tick much shorter than this would only spin.
const MinInterval = time.Millisecond

// Every calls do every interval (at least MinInterval), on a goroutine of its own, until the
// returned stop is called; stop returns once do no longer runs, so that nothing do does
// happens after it (a progress line written, a heartbeat sent). A call of do that outlasts an
// interval delays the next; none overlap. stop may be called more than once: a later call
// returns once the first has. do must not call stop, which would wait for do to return.
func Every(interval time.Duration, do func()) (stop func()) {
	return EveryNext(interval, func() time.Duration {
		do()
		return interval
	})
}

// EveryNext is Every whose do returns the interval until its next call (at least
// MinInterval, as the first): a heartbeat whose leases change, say. The first call comes
// interval after EveryNext.
func EveryNext(interval time.Duration, do func() (next time.Duration)) (stop func()) {
	interval = max(interval, MinInterval)
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
				if next := max(do(), MinInterval); next != interval {
					interval = next
					tick.Reset(interval)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
