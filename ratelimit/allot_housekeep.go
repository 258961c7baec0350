package ratelimit

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

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
