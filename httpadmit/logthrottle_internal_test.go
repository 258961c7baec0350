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

// A keyed throttle lets one line a second through per key: a hot key does
// not hold back another's line, and its own count of lines held back comes
// with its next line.
func TestKeyedThrottle(t *testing.T) {
	t.Parallel()
	var th keyedThrottle[string]
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{"hot", 0, true, 0}, {"hot", 100 * time.Millisecond, false, 0}, {"cold", 200 * time.Millisecond, true, 0},
		{"hot", 300 * time.Millisecond, false, 0}, {"cold", 400 * time.Millisecond, false, 0},
		{"hot", time.Second, true, 2}, {"cold", 1400 * time.Millisecond, true, 1}, {"hot", 1500 * time.Millisecond, false, 0},
	} {
		ok, suppressed := th.allow(s.key, t0.Add(s.at))
		if ok != s.ok || suppressed != s.suppressed {
			t.Errorf("step %d, %s at %s: allow = %v, %d; want %v, %d", i, s.key, s.at, ok, suppressed, s.ok, s.suppressed)
		}
	}
}

// A keyed throttle tracks at most maxThrottledKeys keys: past them, new keys
// share one line a second, until keys idle for a second make room (looked
// for at most once a second).
func TestKeyedThrottleIsBounded(t *testing.T) {
	t.Parallel()
	var th keyedThrottle[int]
	t0 := time.Unix(1_800_000_000, 0)
	for k := range maxThrottledKeys {
		if ok, _ := th.allow(k, t0); !ok {
			t.Fatalf("key %d, the first line of a new key, was held back", k)
		}
	}
	type step struct {
		key        int
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{-1, 500 * time.Millisecond, true, 0},  // past the bound: the keys past it share a line a second
		{-2, 600 * time.Millisecond, false, 0}, // held back with -1's
		{-1, 700 * time.Millisecond, false, 0},
		{0, 800 * time.Millisecond, false, 0},   // a tracked key keeps its own
		{-3, 1200 * time.Millisecond, false, 0}, // the sweep at 500 ms found no key idle: the next is at 1.5 s
		{-3, 1500 * time.Millisecond, true, 0},  // the keys idle for a second make room: -3 is tracked
		{-3, 1600 * time.Millisecond, false, 0},
		{-4, 1700 * time.Millisecond, true, 0},
	} {
		ok, suppressed := th.allow(s.key, t0.Add(s.at))
		if ok != s.ok || suppressed != s.suppressed {
			t.Errorf("step %d, key %d at %s: allow = %v, %d; want %v, %d", i, s.key, s.at, ok, suppressed, s.ok, s.suppressed)
		}
	}
	if n := th.tracked(); n > maxThrottledKeys {
		t.Errorf("%d keys tracked, want at most %d", n, maxThrottledKeys)
	}
}

// tracked is how many keys t tracks.
func (t *keyedThrottle[K]) tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys)
}
