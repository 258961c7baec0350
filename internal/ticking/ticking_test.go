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
