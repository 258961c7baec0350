package httpadmit

import (
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	t.Parallel()
	var th throttle
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{{0, true, 0}, {100 * time.Millisecond, false, 0}, {900 * time.Millisecond, false, 0}, {time.Second, true, 2}, {1500 * time.Millisecond, false, 0}, {3 * time.Second, true, 1}} {
		ok, suppressed := th.allow(t0.Add(s.at))
		if ok != s.ok || suppressed != s.suppressed {
			t.Errorf("step %d at %s: allow = %v, %d; want %v, %d", i, s.at, ok, suppressed, s.ok, s.suppressed)
		}
	}
}
