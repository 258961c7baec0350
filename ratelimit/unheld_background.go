package ratelimit

import "sync"

// unheldGiveBacks counts the give-backs of what nobody holds that run off
// their caller's goroutine (giveBackUnheld); Limiter.Close waits for them.
// A counter under a lock rather than a sync.WaitGroup: a call that comes
// while Close waits may start one when none runs (Close then waits for it
// too), an Add that a WaitGroup forbids during its Wait.
type unheldGiveBacks struct {
	mu   sync.Mutex
	n    int
	idle *sync.Cond // on mu: n fell to 0
}

func newUnheldGiveBacks() *unheldGiveBacks {
	u := &unheldGiveBacks{}
	u.idle = sync.NewCond(&u.mu)
	return u
}

// goGiveBack runs giveBack on a goroutine of its own, counted until it
// returns.
func (u *unheldGiveBacks) goGiveBack(giveBack func()) {
	u.mu.Lock()
	u.n++
	u.mu.Unlock()
	go func() {
		defer u.done()
		giveBack()
	}()
}

func (u *unheldGiveBacks) done() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.n == 0 {
		u.idle.Broadcast()
	}
}

// wait returns once no give-back runs.
func (u *unheldGiveBacks) wait() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.n > 0 {
		u.idle.Wait()
	}
}

// giveBackUnheld runs giveBack, which gives back what nobody holds
// (retryUnheld: for up to unheldReleaseSpan while the database is down),
// off the caller's goroutine: the caller's answer does not depend on it
// (its context's error, or the failure it was told of), so a caller who
// left is not held while the give-back retries. Close waits for it. On a
// single connection and inside a caller's transaction it runs on the
// caller's goroutine: a statement there must not run beside the caller's
// next one (oneConnection); a single connection that fails is closed, and
// the give-back stops at once (hopeless).
func (l *Limiter) giveBackUnheld(giveBack func()) {
	if l.inTx || oneConnection(l.conn) || l.unheld == nil {
		giveBack()
		return
	}
	l.unheld.goGiveBack(giveBack)
}
