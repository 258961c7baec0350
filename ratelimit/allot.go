package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"
)

// How often the housekeeping loop runs and reports consumption, and how
// long a block whose window ended may wait for requests still in flight.
const (
	allotTick        = 100 * time.Millisecond
	allotSyncEvery   = time.Second
	allotStuckAfter  = time.Minute
	allotCallTimeout = 10 * time.Second
)

// maxBlockAdmissions bounds the requests one block admits: it keeps each
// until it is returned (to settle copies of their grants by LocalID), and
// requests of tiny amounts would hardly spend it, so a busy counter's block
// would keep every request of its window (an hour's, a day's). A block
// sized to a second's traffic (Horizon) admits far fewer.
const maxBlockAdmissions = 1 << 16

// Reasons recorded on returned blocks (and reasonWindowEnded).
const (
	reasonIdle       = "idle"
	reasonTrimmed    = "trimmed"
	reasonClosed     = "closed"
	reasonHolderLost = "holder_lost"
)

// allotments holds one Limiter's blocks: per counter, the block it admits
// from, the next one (taken ahead when the current one runs low) and those
// draining (closed to new admissions, waiting for requests in flight).
type allotments struct {
	l    *Limiter
	opts AllotmentOptions
	// instance is random, unique to this Limiter: with seq, the last
	// admission's sequence, it makes each Local admission's LocalID.
	instance string
	seq      atomic.Uint64
	// maxAdmissions is maxBlockAdmissions unless a test set it.
	maxAdmissions int
	// counts are what Stats reports (LocalStats).
	counts localCounts

	mu   sync.Mutex
	sets map[counterKey]*blockSet
	// peak is the most counters sets held since it was made (shrinkLocked).
	peak    int
	closed  bool
	started bool
	// refills counts blocks being taken from the database; Close waits for
	// them, so a block taken while it runs is returned with the others.
	refills sync.WaitGroup
	stop    chan struct{}
	stopped chan struct{}
	// done is closed once close has returned every block: a second close
	// waits for it.
	done chan struct{}
	// dbAt is the database's clock at localAt, this host's time (with its
	// monotonic reading) as last measured (readClock: by each block taken
	// and each sync); zero until the first block.
	dbAt, localAt time.Time
}

func newAllotments(l *Limiter, o AllotmentOptions) *allotments {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	maxAdmissions := l.opts.blockAdmissions
	if maxAdmissions <= 0 {
		maxAdmissions = maxBlockAdmissions
	}
	return &allotments{l: l, opts: o.withDefaults(), sets: map[counterKey]*blockSet{}, instance: hex.EncodeToString(b),
		maxAdmissions: maxAdmissions, stop: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
}

// set returns the blocks of a counter, starting the housekeeping loop with
// the first one; nil once the Limiter is closed.
func (a *allotments) set(k counterKey) *blockSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	s := a.sets[k]
	if s == nil {
		s = &blockSet{a: a, key: k, lastTake: time.Now()} // not idle before its first request
		a.sets[k] = s
		a.peak = max(a.peak, len(a.sets))
	}
	if !a.started {
		a.started = true
		go a.loop()
	}
	return s
}

// beginRefill counts a block about to be taken; false once the Limiter is
// closed (no block may be taken then). blockSet.endRefillLocked ends each
// true with refills.Done, after the block is installed.
func (a *allotments) beginRefill() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.refills.Add(1)
	return true
}

// take admits w from this process's block of its counter, taking a block
// first when there is none with room. It returns nil when the limit must
// be decided in the database instead: no block could be had for its amount
// (the window is nearly full, or the amount is more than a block may be),
// the window is about to end (every moment of a window not longer than
// Margin is), or the Limiter is closed.
func (a *allotments) take(ctx context.Context, w windowLimit) *localAdmission {
	if !a.fitsBlock(w) {
		return nil
	}
	for {
		s := a.set(w.counter())
		if s == nil {
			return nil
		}
		if la, dropped := s.take(ctx, w); !dropped {
			return la
		}
	}
}

// fitsBlock reports whether w is one a block may admit: its amount at
// most MaxShare of its limit, the most a block may be, and its window
// longer than Margin, before its end a block stops admitting (a block of a
// shorter one would admit nothing). The rest is decided in the database,
// with no block taken.
func (a *allotments) fitsBlock(w windowLimit) bool {
	window := time.Duration(w.windowSeconds) * time.Second
	return w.Limit.Amount <= w.Limit.Limit*a.opts.MaxShare && window > a.opts.Margin
}
