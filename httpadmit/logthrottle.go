package httpadmit

import (
	"sync"
	"time"
)

// logInterval is how often a throttle lets a line through.
const logInterval = time.Second

// throttle lets one log line through per logInterval and counts the ones
// it held back, so that a database that is down does not flood the log
// with a line per request. Its zero value is ready to use.
type throttle struct {
	mu    sync.Mutex
	lines lineCount
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (t *throttle) allow(now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lines.allow(now)
}

// lineCount is the state of one throttled stream of lines: when the last
// went out, and how many were held back since.
type lineCount struct {
	last       time.Time
	suppressed int
}

func (c *lineCount) allow(now time.Time) (ok bool, suppressed int) {
	if !c.last.IsZero() && now.Sub(c.last) < logInterval {
		c.suppressed++
		return false, 0
	}
	c.last, suppressed, c.suppressed = now, c.suppressed, 0
	return true, suppressed
}

// maxThrottledKeys bounds the keys a keyedThrottle tracks.
const maxThrottledKeys = 1024

// keyedThrottle is a throttle per key: one line per key per logInterval,
// so that a hot key does not flood the log, nor hold back the line of a
// key that comes up once. It tracks at most maxThrottledKeys keys; past
// them, the keys it does not track share one line per logInterval, until
// keys idle for a logInterval make room (and are forgotten, with the count
// of lines they held back). Its zero value is ready to use.
type keyedThrottle[K comparable] struct {
	mu     sync.Mutex
	keys   map[K]*lineCount
	others lineCount // of the keys past maxThrottledKeys
	swept  time.Time // when idle keys were last dropped
}

// allow reports whether to log a line of key k now, and how many of its
// lines were held back since its last one logged.
func (t *keyedThrottle[K]) allow(k K, now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, tracked := t.keys[k]
	if !tracked {
		if len(t.keys) >= maxThrottledKeys && now.Sub(t.swept) >= logInterval {
			// At most once an interval: with every key busy, a sweep per
			// line would read the whole map each time.
			t.swept = now
			for k, c := range t.keys {
				if now.Sub(c.last) >= logInterval {
					delete(t.keys, k)
				}
			}
		}
		if len(t.keys) >= maxThrottledKeys {
			return t.others.allow(now)
		}
		if t.keys == nil {
			t.keys = make(map[K]*lineCount)
		}
		c = &lineCount{}
		t.keys[k] = c
	}
	return c.allow(now)
}
