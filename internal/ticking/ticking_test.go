package ticking

import (
	"sync/atomic"
	"testing"
	"time"
)

// stop waits for a call of do that is running, and no call starts after it.
func TestEveryStopWaitsForARunningCallAndNoneStartsAfter(t *testing.T) {
	var calls, running atomic.Int64
	entered := make(chan struct{}, 1)
	stop := Every(time.Millisecond, func() {
		running.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		time.Sleep(20 * time.Millisecond)
		calls.Add(1)
		running.Add(-1)
	})
	<-entered
	stop()
	if n := running.Load(); n != 0 {
		t.Fatalf("%d call(s) still running after stop returned", n)
	}
	after := calls.Load()
	time.Sleep(30 * time.Millisecond)
	if n := calls.Load(); n != after {
		t.Fatalf("%d call(s) after stop returned", n-after)
	}
}

// An interval of zero or less does not panic (time.NewTicker would, on the goroutine, taking
// the process down): it is taken as MinInterval, so do still runs, and not in a busy loop.
func TestEveryNonPositiveIntervalIsClampedToMinInterval(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		var calls atomic.Int64
		ran := make(chan struct{}, 1)
		start := time.Now()
		stop := Every(interval, func() {
			calls.Add(1)
			select {
			case ran <- struct{}{}:
			default:
			}
		})
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			stop()
			t.Fatalf("Every(%s): do never ran", interval)
		}
		time.Sleep(20 * time.Millisecond)
		stop()
		// At most one call a MinInterval since the start (and one more for the edge).
		if n, most := calls.Load(), int64(time.Since(start)/MinInterval)+1; n > most {
			t.Fatalf("Every(%s): %d calls in %s, more than one a %s", interval, n, time.Since(start), MinInterval)
		}
	}
}

// stop may be called more than once (a deferred stop after an explicit one): the later calls
// return at once, and do no harm.
func TestEveryStopIsIdempotent(t *testing.T) {
	stop := Every(time.Hour, func() {})
	stop()
	stop()
}

// The interval do returns is the one until its next call: longer, the
// calls slow down; shorter, they speed up.
func TestEveryNextTicksAtTheIntervalDoReturns(t *testing.T) {
	var calls atomic.Int64
	stop := EveryNext(time.Millisecond, func() time.Duration {
		if calls.Add(1) == 1 {
			return time.Hour
		}
		return time.Millisecond
	})
	time.Sleep(100 * time.Millisecond)
	stop()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls in 100 ms, want 1: the first asked for the next an hour later", n)
	}

	calls.Store(0)
	stop = EveryNext(50*time.Millisecond, func() time.Duration { calls.Add(1); return time.Millisecond })
	time.Sleep(200 * time.Millisecond)
	stop()
	if n := calls.Load(); n < 10 {
		t.Fatalf("%d calls in 200 ms, the first after 50 ms and the next 1 ms apart, want at least 10", n)
	}
}
