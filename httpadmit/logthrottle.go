package httpadmit

import (
	"sync"
	"time"
)

// throttle lets one log line through per interval and counts the ones it
// held back, so that a database that is down does not flood the log with
// a line per request.
type throttle struct {
	interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (t *throttle) allow(now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.interval {
		t.suppressed++
		return false, 0
	}
	t.last, suppressed, t.suppressed = now, t.suppressed, 0
	return true, suppressed
}
