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
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (t *throttle) allow(now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < logInterval {
		t.suppressed++
		return false, 0
	}
	t.last, suppressed, t.suppressed = now, t.suppressed, 0
	return true, suppressed
}
