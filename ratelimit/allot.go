package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/internal/runecut"
)

// AllotmentOptions size and time the blocks that Local limits are admitted
// from. Zero fields take their defaults, and so do a negative Horizon,
// IdleAfter or Margin and a negative or NaN MaxShare; a MaxShare above 1
// is 1.
type AllotmentOptions struct {
	// Holder names this process in gateway_rate_limit_allotments; the
	// default is host/pid/random, as a maintenance run's lease holder is
	// (the host cut to 200 bytes, the random part 12 hex digits). Text
	// PostgreSQL cannot hold (NUL bytes,
	// invalid UTF-8) is dropped or replaced by U+FFFD, and the holder is at
	// most MaxScopeBytes bytes, as a scope is: a longer one is cut to them,
	// never inside a character.
	Holder string
	// MaxShare caps a block at this fraction of its limit (default
	// DefaultAllotmentMaxShare, 1/16), so that no process sits on more than
	// its share while others wait. One above 1 is 1: a block of up to the
	// whole limit, though still at most half of what the window has free
	// unless the request waiting for it needs more, so one process's two
	// blocks may hold three quarters of it. A request whose amount is above
	// the cap is decided in the database.
	MaxShare float64
	// Horizon sizes a block to what this process admitted on its counter in
	// this much time, at the rate it is admitting (default
	// DefaultAllotmentHorizon, 1s). The rate is measured over 50 ms at least;
	// what was admitted in less counts as 50 ms' worth, so a burst's blocks
	// grow from one to the next.
	Horizon time.Duration
	// IdleAfter returns a block nothing was admitted from for this long
	// (default DefaultAllotmentIdleAfter, 2s), so that another process can
	// use its units.
	IdleAfter time.Duration
	// Margin stops admitting from a block this long before its window ends on
	// the database's clock (default DefaultAllotmentMargin, 100ms): the last
	// moments of a window are decided in the database, which counts them in
	// the right window whatever this host's clock says. The database's clock
	// is estimated from its readings (each block taken, and the report of open
	// blocks every second) plus the time elapsed on this host since: a step of
	// the database's clock (NTP, a failover to a host whose clock differs)
	// reaches the estimate within about a second, while this process holds a
	// block. A block admits only while the estimate is within its window: one
	// whose window the database's clock stepped back before goes back as if
	// its window had ended. While it holds no block the estimate only decides
	// whether to take one, and taking one reads the clock anew. A Local limit
	// whose window is not longer than Margin (a Margin of a second or more and
	// a one-second window) would never admit from a block: it is decided in
	// the database on every request, as if it were not Local, taking no block.
	Margin time.Duration
}

// Defaults of AllotmentOptions.
const (
	DefaultAllotmentMaxShare  = 1.0 / 16
	DefaultAllotmentHorizon   = time.Second
	DefaultAllotmentIdleAfter = 2 * time.Second
	DefaultAllotmentMargin    = 100 * time.Millisecond
)

// WithAllotments sets how blocks of Local limits are sized and timed.
func WithAllotments(o AllotmentOptions) Option {
	return func(opts *options) { opts.allot = o }
}

func (o AllotmentOptions) withDefaults() AllotmentOptions {
	// A holder the database refuses would fail every block taken: Local
	// limits would silently all be decided in the database, a failed
	// statement more per request. One of megabytes would be written to
	// every block's row.
	o.Holder = runecut.Text(o.Holder, MaxScopeBytes)
	if o.Holder == "" {
		o.Holder = newHolder()
	}
	switch {
	case o.MaxShare > 1:
		o.MaxShare = 1 // a block of the whole limit: what was asked for comes closest
	case !(o.MaxShare > 0): // NaN too
		o.MaxShare = DefaultAllotmentMaxShare
	}
	if o.Horizon <= 0 {
		o.Horizon = DefaultAllotmentHorizon
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = DefaultAllotmentIdleAfter
	}
	if o.Margin <= 0 {
		o.Margin = DefaultAllotmentMargin
	}
	return o
}

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

// dbNow estimates the database's clock: its last reading plus the time
// elapsed since on this host (sinceLocal).
func (a *allotments) dbNow() time.Time {
	now, _ := a.dbClock()
	return now
}

// dbClock is dbNow, and whether the database's clock was read yet (before
// that, this host's clock stands in).
func (a *allotments) dbClock() (time.Time, bool) {
	a.mu.Lock()
	dbAt, localAt := a.dbAt, a.localAt
	a.mu.Unlock()
	if localAt.IsZero() {
		return time.Now(), false
	}
	return dbAt.Add(a.sinceLocal(localAt)), true
}

// readClock records a reading of the database's clock, dbNow, by a
// statement sent at sent (see allotTake for why sent). A reading sent
// before the one held is older and is dropped: statements of the
// housekeeping and of refills overlap.
func (a *allotments) readClock(dbNow, sent time.Time) {
	if step := a.l.opts.dbClockStep; step != nil {
		dbNow = dbNow.Add(step())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.localAt.IsZero() || !sent.Before(a.localAt) {
		a.dbAt, a.localAt = dbNow, sent
	}
}

// sinceLocal is the time elapsed since localAt on this host: on its
// monotonic clock, so that a step back of the wall clock (NTP) does not
// take the estimate back, or on its wall clock when that moved further:
// the monotonic clock stops while the host sleeps (a suspended machine, a
// hibernated VM; see package time), and the database's clock does not. An
// estimate behind the database's clock would admit from blocks past their
// window; one ahead only ends them early.
func (a *allotments) sinceLocal(localAt time.Time) time.Duration {
	now := time.Now()
	if a.l.opts.wallClock != nil {
		now = a.l.opts.wallClock()
	}
	return max(time.Since(localAt), now.Round(0).Sub(localAt.Round(0)))
}

// windowEnding reports whether the current window of windowSeconds ends
// within Margin on the database's clock: a block taken now would admit
// nothing (and one is taken, and returned, per request). False before the
// database's clock was read: the first block reads it.
func (a *allotments) windowEnding(windowSeconds int32) bool {
	now, known := a.dbClock()
	if !known {
		return false
	}
	w := int64(windowSeconds) * int64(time.Second) // windows are aligned to the Unix epoch
	ns := now.UnixNano()
	return a.pastMargin(now, time.Unix(0, ns-ns%w+w))
}

// stuckAfter is how long after its window's end a block waits for the
// requests it admitted that are still in flight: allotStuckAfter, unless a
// test set it.
func (a *allotments) stuckAfter() time.Duration {
	if d := a.l.opts.stuckAfter; d > 0 {
		return d
	}
	return allotStuckAfter
}

// pastMargin reports whether now is within Margin of resetAt, a window's
// end: no block admits from that window any more.
func (a *allotments) pastMargin(now, resetAt time.Time) bool {
	return !now.Before(resetAt.Add(-a.opts.Margin))
}

// admits reports whether b may admit at now, the estimate of the
// database's clock: from its window's start to Margin before its end.
// Before the start, the database's clock stepped back (NTP, a failover to
// a host whose clock is behind): the database counts an earlier window,
// whose counter admits its own limit, and admitting from b as well would
// admit more than the limit within that time.
func (a *allotments) admits(now time.Time, b *block) bool {
	return !now.Before(b.windowStart) && !a.pastMargin(now, b.resetAt)
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

// loop does the housekeeping until Close: blocks of ended windows, idle
// blocks and drained blocks go back; consumption is reported every second.
func (a *allotments) loop() {
	defer close(a.stopped)
	tick := time.NewTicker(allotTick)
	defer tick.Stop()
	lastSync := time.Now()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
		_ = a.housekeep(false) // a failed return is tried again next round
		if time.Since(lastSync) >= allotSyncEvery {
			lastSync = time.Now()
			a.sync()
		}
	}
}

// snapshot lists the counters this process holds blocks of.
func (a *allotments) snapshot() []*blockSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	sets := make([]*blockSet, 0, len(a.sets))
	for _, s := range a.sets {
		sets = append(sets, s)
	}
	return sets
}

// housekeep returns the blocks that are done (closing: every block) and
// trims the ones set aside with requests still in flight. It returns why
// the return failed, if it did (the blocks are then back in their sets).
func (a *allotments) housekeep(closing bool) error {
	sets := a.snapshot()
	if hook := a.l.opts.housekeepHook; hook != nil {
		hook()
	}
	var done []returning
	var trims []trimming
	for _, s := range sets {
		d, t := s.collect(closing)
		done, trims = append(done, d...), append(trims, t...)
	}
	for _, t := range trims {
		a.trim(t)
	}
	err := a.giveBack(done)
	a.dropIdle(sets)
	return err
}

// dropIdle forgets the counters of sets that hold nothing and had no
// request for IdleAfter, so that a process that sees keys come and go for
// months keeps only those in use. It runs after giveBack, which puts the
// blocks it failed to return back in their sets. A request that got a set
// before it was dropped finds it marked and asks for the counter's new
// one (take). The set's lock is taken before a's, as take does.
func (a *allotments) dropIdle(sets []*blockSet) {
	for _, s := range sets {
		s.mu.Lock()
		if s.idleLocked() {
			s.dropped = true
			a.mu.Lock()
			if a.sets[s.key] == s {
				delete(a.sets, s.key)
			}
			a.mu.Unlock()
		}
		s.mu.Unlock()
	}
	a.mu.Lock()
	a.shrinkLocked()
	a.mu.Unlock()
}

// shrinkLocked makes sets anew once it holds at most a quarter of the most
// it held since it was made: a Go map keeps the table of its most entries
// when they are deleted, and ranging over it walks all of that table. A
// burst of keys (200,000 kept 18 MB, which the housekeeping walked ten
// times a second) would otherwise be paid for as long as the process runs.
// Copying the quarter left costs less than the deletions that came first.
func (a *allotments) shrinkLocked() {
	if a.peak < minShrinkPeak || 4*len(a.sets) > a.peak {
		return
	}
	sets := make(map[counterKey]*blockSet, len(a.sets)) // maps.Clone copies the table as it is
	maps.Copy(sets, a.sets)
	a.sets, a.peak = sets, len(sets)
}

// minShrinkPeak is the fewest counters a map of sets must have held to be
// made anew when it empties (shrinkLocked): a small one costs little.
const minShrinkPeak = 1024

// returning is a block on its way back, with what to charge and why.
type returning struct {
	set    *blockSet
	b      *block
	used   units
	reason string
}

// giveBack returns blocks to their counters in one statement. When it
// fails (the database unreachable, a lock timeout), the blocks go back to
// their sets and the next round, or Close, tries again; a process that
// never manages leaves them to recovery once their window is over
// (RecoveryAllotmentFindLost), and nothing over-admits meanwhile. It
// returns the statement's error.
func (a *allotments) giveBack(rs []returning) error {
	if len(rs) == 0 {
		return nil
	}
	p := db.AllotmentReturnParams{}
	for _, r := range rs {
		p.Ids = append(p.Ids, r.b.id)
		p.Used = append(p.Used, r.used.Text())
		p.Reasons = append(p.Reasons, r.reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), allotCallTimeout)
	defer cancel()
	_, err := a.l.queries.AllotmentReturn(ctx, a.l.conn, p)
	if err != nil {
		a.counts.fail(err)
	}
	for _, r := range rs {
		r.set.mu.Lock()
		if err != nil {
			r.set.requeueLocked(r.b)
		} else {
			r.b.admissions = nil // settling a copy of their grants is unknown from now on
		}
		r.set.mu.Unlock()
	}
	return err
}

// sessionLost reports an error that ended the session a statement was sent
// on (the server restarted or ended it; the network dropped it), not an
// answer of a live server nor a timeout: the same statement on a new
// session may well go through. pgxpool hands out a session used in the
// last second without pinging it (on a pool set up with ConfigurePool,
// unless its socket shows the server ended it), so the first statement
// after a restart can meet such an error.
func sessionLost(err error) bool {
	if err == nil || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P: the server shut down or ended the session; 08: the connection failed.
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	return true
}

// trimming is a block closed for want of room, to be trimmed to what it
// admitted while requests admitted from it are still in flight, so that
// its unused units go back to the window now rather than when they end;
// and again as they settle below their estimates, or are released. limit
// is its set's latest limit (blockSet.limit), for the counter's
// limit_value.
type trimming struct {
	set   *blockSet
	b     *block
	to    units
	limit float64
}

// trim trims one block; a failed trim is tried again on the next round.
func (a *allotments) trim(t trimming) {
	k := t.set.key
	ctx, cancel := context.WithTimeout(context.Background(), allotCallTimeout)
	defer cancel()
	err := a.l.queries.AllotmentTrim(ctx, a.l.conn, db.AllotmentTrimParams{
		Holder: a.opts.Holder, ScopeType: k.scopeType, ScopeKey: k.scopeKey, Metric: k.metric,
		WindowSeconds: k.windowSeconds, LimitValue: t.limit, TrimID: t.b.id, TrimTo: t.to.Text(),
	})
	if err != nil {
		a.counts.fail(err)
		return
	}
	t.set.mu.Lock()
	t.b.trimmedTo(t.to)
	t.set.mu.Unlock()
}

// sync reports what each open block has admitted so far, and reads the
// database's clock with it: an estimate gone stale (the database's clock
// stepped, its primary failed over to a host whose clock differs) is
// corrected within a sync, not only when the next block is taken.
func (a *allotments) sync() {
	sets := a.snapshot()
	var p db.AllotmentSyncParams
	for _, s := range sets {
		s.mu.Lock()
		for _, b := range s.open() {
			p.Ids = append(p.Ids, b.id)
			p.Consumed = append(p.Consumed, b.spent().Text())
		}
		s.mu.Unlock()
	}
	if len(p.Ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), allotCallTimeout)
	defer cancel()
	var row db.AllotmentSyncRow
	sent, err := a.onSession(ctx, func(conn db.DBTX) (err error) {
		row, err = a.l.queries.AllotmentSync(ctx, conn, p)
		return err
	})
	if err != nil {
		a.counts.fail(err)
		return
	}
	a.readClock(row.DbNow, sent)
}

// close returns every block (charging requests still in flight at their
// estimates) and stops the housekeeping. A close while another runs waits
// for it, so that neither returns before the blocks are back.
func (a *allotments) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.closed = true
	started := a.started
	a.mu.Unlock()
	defer close(a.done)
	if started {
		close(a.stop)
		<-a.stopped
	}
	a.refills.Wait()
	// Close has no next round: a return that failed on a session the server
	// had ended is sent once more, on a new one (the pool dropped the dead
	// one), and so is one that met pgx's statement cache on a session that
	// does not hold the statement (behind a transaction pooler: pgx dropped
	// it from its cache and prepares it anew). A return is idempotent. A
	// timeout is not tried again, so that a Close on a hanging database
	// waits for one call's timeout, not two.
	if err := a.housekeep(true); sessionLost(err) || poolerr.StatementCacheLost(err) {
		_ = a.housekeep(true)
	}
	a.abandonUnreturned()
}

// abandonUnreturned lets go of the blocks Close could not return (the
// database unreachable, a lock timeout): nothing of this Limiter reaches
// them any more, and Recover returns them once their window is over,
// charging their last report. A later Commit or Release of what they
// admitted, of the grant or of a copy, reports StatusUnknown: it used to
// report Settled true with an actual amount no counter would record.
func (a *allotments) abandonUnreturned() {
	for _, s := range a.snapshot() {
		s.mu.Lock()
		for _, b := range s.open() {
			b.abandoned, b.admissions = true, nil
			a.counts.abandoned.Add(1)
		}
		s.cur, s.next, s.draining = nil, nil, nil
		s.mu.Unlock()
	}
}

// Close gives back what this Limiter holds and waits for its background
// work. Call it when the process stops, once it makes no more calls (after
// http.Server.Shutdown, say), and before closing the pool, which it does
// not close: what the background work gives back would be lost if the pool
// closed first.
//
// It returns the blocks of Local limits this Limiter holds, charging
// requests still in flight at their estimates, and stops its housekeeping;
// later Local limits are decided in the database. Blocks of a process that
// does not close stay reserved until their window ends, and so do those a
// Close could not return (the database unreachable): Maintenance.Recover
// returns them, charging their last report, and a Commit or Release of
// what they admitted reports StatusUnknown.
//
// It then waits for the combined statements in flight, those whose callers
// all left included (each bounded by 100 ms after its last caller left),
// and for the give-backs of what nobody holds, which run in the
// background: the release of what a Reserve granted a caller who had left,
// or what a hot batch granted and could not confirm, and the undo of a
// task created or claimed for a caller who had left. Each is tried again
// for up to 2 s while it fails, 30 s at most in all (a try that hangs),
// both counted from when it was handed to the background. On a single
// connection they run before the call that handed them over returns.
//
// Give-backs run a bounded number at a time, the rest waiting their turn
// (one waiting past its 2 s still tries once; 200 waiting per one running
// at most, 65536 in all, beyond which each new one drops the oldest
// waiting, counted in Stats.GiveBacksDropped and Stats.Lost;
// Stats.GiveBacksWaiting says how many wait now). At a time run: the
// releases of what a combined Reserve granted, twice a combined
// statement's worth for each statement in flight (WithCombining); the
// others, each a statement on a connection of its own, half the pool's
// MaxConns (one at least; on an Executor of one's own that embeds no
// *pgxpool.Pool, half of pgxpool's default, which is 4 or the number of
// CPUs, whichever is more), so that live calls keep the other half.
//
// A Close called while another runs waits for it; one called after it
// waits only for what calls made since started (at once when there were
// none).
func (l *Limiter) Close() {
	if l == nil { // a zero Limiter has nothing to close either
		return
	}
	if l.allot != nil {
		l.allot.close()
	}
	if l.reserves != nil { // combining is on
		l.reserves.drain()
		l.settles.drain()
	}
	if l.unheld != nil { // after the combiners: their batches start give-backs
		l.unheld.wait()
	}
}

// allotTake runs AllotmentTake and reads the database's clock.
//
// db_now is now(), read when the statement starts, before it waits for the
// counter row (and a Local counter is a hot one): it is not the middle of
// the call, which may have waited for seconds, but some instant after
// sent, taken once the statement has a session (onSession). Measured
// against sent, the estimate can only run ahead of the database's clock (by
// the time to send), which ends blocks early; against the middle of a call
// that waited, it fell behind by half the wait, and blocks admitted past
// their window's end.
//
// A request that was sent and lost its answer counts as lost (Stats.Lost,
// see countLost): the server may have granted a block that this process
// never learns of, and so never admits from, reports or returns; its units
// stay reserved until Recover returns it after its window.
func (a *allotments) allotTake(ctx context.Context, p db.AllotmentTakeParams) (db.AllotmentTakeRow, error) {
	ctx, cut := withCutMark(ctx)
	var row db.AllotmentTakeRow
	sent, err := a.onSession(ctx, func(conn db.DBTX) (err error) {
		row, err = a.l.queries.AllotmentTake(ctx, conn, p)
		return err
	})
	if err != nil {
		if !sent.IsZero() { // the pool gave it a session: its error is the statement's
			a.l.countLost(1, err, cut.Load())
		}
		return row, err
	}
	a.readClock(row.DbNow, sent)
	return row, nil
}

// onSession runs query, which reads the database's clock, and returns when
// it was sent: on a pool, once a session is acquired (zero when none was:
// nothing was sent). Stamped before the
// wait for one, a reading put the estimate ahead by that wait, ending
// blocks that much early: all of them at once, on a pool busy for longer
// than a window's admitting part (a block of a one-second window taken
// after a second's wait was closed as soon as it came, and another taken).
func (a *allotments) onSession(ctx context.Context, query func(db.DBTX) error) (time.Time, error) {
	pool, ok := a.l.conn.(*pgxpool.Pool)
	if !ok {
		return time.Now(), query(a.l.conn)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Release()
	return time.Now(), query(conn)
}
