package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// In the last Margin of a window, Local limits are decided in the
// database: a block taken then admits nothing. Requests used to take one
// all the same (up to three each, every one written to the counter and
// the allotments table, then returned) before falling back. A Margin a
// moment shorter than the window makes nearly every moment such a last
// moment (one not shorter takes no block at all: allot_options_test.go); the
// window is hourWindow's, an hour or a few minutes more, and the Margin a
// moment shorter than that.
func TestLocalTakesNoBlockInTheLastMomentsOfAWindow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Margin: hour - time.Millisecond}))
	defer l.Close()
	key := uniqueKey("lastmoments")
	for range 10 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if g.Reservations[0].Local {
			t.Fatalf("admitted from a block within Margin of its window's end: %+v", g.Reservations[0])
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The first request reads the database's clock with the block it takes.
	if blocks := allotments(t, pool, "model", key); len(blocks) > 1 {
		t.Errorf("%d blocks taken for 10 requests none of them could serve, want at most 1", len(blocks))
	}
	l.Close()
	if rows := counterRows(t, pool, "model", key); rows[0].UsedValue != 10 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 10, reserved 0", rows[0])
	}
	assertDoctorOK(t, pool)
}

// A host that slept (suspended, its VM hibernated) past the window of a
// block admits nothing more from that block: the monotonic clock stood
// still while the host slept, and the estimate of the database's clock,
// which followed only it, stayed in the block's window.
func TestLocalBlockEndsWhenTheHostSleptPastItsWindow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	var slept atomic.Int64
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}),
		ratelimit.WithWallClock(func() time.Time { return time.Now().Add(time.Duration(slept.Load())) }))
	defer l.Close()
	key := uniqueKey("slept")
	first := reserveLocal(t, l, hour, key, 1000, 1).Reservations[0]
	slept.Store(int64(2 * time.Hour)) // the wall clock moved two hours on, the monotonic one did not
	reserveNotFrom(t, l, hour, key, first.Allotment, "after the host slept two hours")
}

// reserveNotFrom reserves 1 of localWindow(hour, key, 1000, 1) on l and
// fails t if it was admitted from the block named block, which what
// happened (after) should have ended.
func reserveNotFrom(t *testing.T, l *ratelimit.Limiter, hour time.Duration, key, block, after string) ratelimit.Grant {
	t.Helper()
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.Reservations[0]; r.Local && r.Allotment == block {
		t.Fatalf("admitted from block %s (window %s to %s) %s", r.Allotment, r.WindowStart, r.ResetAt, after)
	}
	return g
}

// clockSteppedLimiter is a Limiter on a new database whose blocks stay
// open while idle for an hour, and whose estimate of the database's clock
// is moved on by what step holds (WithDBClockStep), with the length of its
// Local windows (hourWindow: two hours' step moves past any of them); it is
// closed when the test ends.
func clockSteppedLimiter(t *testing.T) (l *ratelimit.Limiter, pool *pgxpool.Pool, step *atomic.Int64, hour time.Duration) {
	t.Helper()
	pool = pgtest.NewPool(t)
	hour = hourWindow(t, pool)
	step = new(atomic.Int64)
	l = ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}),
		ratelimit.WithDBClockStep(func() time.Duration { return time.Duration(step.Load()) }))
	t.Cleanup(l.Close)
	return l, pool, step, hour
}

// awaitDBClockBefore waits until l's estimate of the database's clock is
// before at: a sync of the housekeeping (every second) has read the clock
// stepped back. A fixed sleep raced that sync, which a loaded machine may
// run late; 10s is far past any sync due.
func awaitDBClockBefore(t *testing.T, l *ratelimit.Limiter, at time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if now, known := l.DBClock(); known && now.Before(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sync read the database's clock stepped back before %s in 10s", at)
		}
	}
}

// A database whose clock steps forward past a block's window (an NTP step
// on its host, a failover to a replica ahead) ends that block within a
// sync of the housekeeping, which reads the database's clock: the estimate
// used to lag until the process took its next block, admitting meanwhile
// from a window the database had ended.
func TestLocalBlockEndsWithinASyncWhenTheDatabaseClockStepsPastItsWindow(t *testing.T) {
	t.Parallel()
	l, _, step, hour := clockSteppedLimiter(t)
	key := uniqueKey("dbstep")
	first := reserveLocal(t, l, hour, key, 1000, 1).Reservations[0]
	step.Store(int64(2 * time.Hour)) // the database's clock is two hours on
	// The housekeeping syncs every second (allotSyncEvery), on a 100ms
	// tick, and returns the block at its next tick once the sync ended it
	// (then its admission is no longer kept); one request after that, or
	// after 10s if the block stays, far past any sync due on a loaded
	// machine (more requests would take the next block ahead, which reads
	// the clock too).
	for deadline := time.Now().Add(10 * time.Second); l.LocalAdmissionsKept() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	reserveNotFrom(t, l, hour, key, first.Allotment, "a sync after the database's clock stepped two hours on")
}

// A database whose clock steps back before a block's window (an NTP step
// on its host, a failover to a host whose clock is behind) ends that block
// within a sync: admission checked only the window's end, so the block of
// the later window went on admitting while the database counted the
// earlier one, whose counter admits its own limit too. A request admitted
// from the block before the step still settles in it, and the block goes
// back charging it.
func TestLocalBlockEndsWithinASyncWhenTheDatabaseClockStepsBackBeforeItsWindow(t *testing.T) {
	t.Parallel()
	l, pool, step, hour := clockSteppedLimiter(t)
	ctx := context.Background()
	key := uniqueKey("dbstepback")
	first := reserveLocal(t, l, hour, key, 1000, 1)
	step.Store(int64(-2 * time.Hour)) // the database's clock is two hours back, before the block's window
	awaitDBClockBefore(t, l, first.Reservations[0].WindowStart)
	g := reserveNotFrom(t, l, hour, key, first.Reservations[0].Allotment, "a sync after the database's clock stepped two hours back")
	s, err := l.Commit(ctx, first, map[string]float64{ratelimit.MetricTokens: 3})
	if err != nil || !s.Reservations[0].Settled || s.Reservations[0].Actual != 3 {
		t.Fatalf("Commit of the request admitted before the step: %+v, %v; want it settled at 3", s, err)
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	// The block goes back without Close, as one whose window ended does.
	var b dbtest.AllotmentListByScopeRow
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b = allotments(t, pool, "model", key)[0]; b.ReturnedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("block %+v not returned in 10s after the database's clock stepped back before its window", b)
		}
	}
	if b.Reason != "window_ended" || b.Used != 3 {
		t.Errorf("block returned with reason %q, used %g; want window_ended, used 3 (the request admitted before the step)", b.Reason, b.Used)
	}
	l.Close()
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 4 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 4 (3 from the block, 1 after the step), nothing reserved", rows)
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}

// A round of the housekeeping read the estimate of the database's clock
// once, before it went through the counters: a block taken meanwhile,
// whose window began after that reading, looked to it like a block of a
// window not begun and was closed (window_ended) as soon as it was taken.
// Here the estimate is two hours behind when the round starts (the
// database's clock stepped back, then forward again, say) and the block is
// taken within the round; it must go on admitting after the round.
func TestLocalBlockTakenDuringAHousekeepingRoundIsNotClosedByIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	var step atomic.Int64
	var armed atomic.Bool
	var rounds atomic.Int64
	taken := make(chan ratelimit.Grant, 1)
	key := uniqueKey("housekeepround")
	var l *ratelimit.Limiter
	hook := func() {
		rounds.Add(1)
		if !armed.CompareAndSwap(true, false) {
			return
		}
		step.Store(0) // the database's clock is right again: the block taken reads it
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
		if err != nil {
			t.Error(err)
		}
		taken <- g
	}
	// A long Horizon makes the block large enough for the requests below.
	l = ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour, Horizon: time.Hour}),
		ratelimit.WithDBClockStep(func() time.Duration { return time.Duration(step.Load()) }),
		ratelimit.WithHousekeepHook(hook))
	defer l.Close()
	first := reserveLocal(t, l, hour, key, 1000, 1)
	if _, err := l.Commit(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	step.Store(int64(-2 * time.Hour))
	awaitDBClockBefore(t, l, first.Reservations[0].WindowStart) // a sync reads the clock two hours back
	armed.Store(true)
	var g ratelimit.Grant
	select {
	case g = <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("no housekeeping round in 10s")
	}
	r := g.Reservations[0]
	if !r.Local || r.Allotment == first.Reservations[0].Allotment {
		t.Fatalf("Reserve within the round: %+v; want a Local admission from a block taken then, not from %s, which the step back ended", r, first.Reservations[0].Allotment)
	}
	// Wait for the round to end: the next one starts after it.
	for n, deadline := rounds.Load(), time.Now().Add(10*time.Second); rounds.Load() <= n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the housekeeping round did not end in 10s")
		}
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	again := reserveLocal(t, l, hour, key, 1000, 1).Reservations[0]
	if again.Allotment != r.Allotment {
		for _, b := range allotments(t, pool, "model", key) {
			t.Logf("block %s window from %s returned %v reason %q", b.ID, b.WindowStart, b.ReturnedAt, b.Reason)
		}
		t.Fatalf("admitted from block %s, want %s, taken a moment before within the current window", again.Allotment, r.Allotment)
	}
}

// A block closed because the database's clock stepped back before its
// window waits for the requests it admitted until its window is over,
// plus allotStuckAfter (a minute; see the next test). Close does not wait:
// it returns the block at once, charging a request still in flight at its
// estimate, whose later Commit changes nothing.
func TestCloseReturnsABlockOfAWindowNotBegunWithARequestInFlight(t *testing.T) {
	t.Parallel()
	l, pool, step, hour := clockSteppedLimiter(t)
	ctx := context.Background()
	key := uniqueKey("closenotbegun")
	inFlight := reserveLocal(t, l, hour, key, 1000, 2)
	step.Store(int64(-2 * time.Hour))
	awaitDBClockBefore(t, l, inFlight.Reservations[0].WindowStart) // a sync reads the clock two hours back: the block closes
	if b := allotments(t, pool, "model", key)[0]; b.ReturnedAt != nil {
		t.Fatalf("block %+v returned with a request it admitted in flight", b)
	}
	start := time.Now()
	l.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %s", took)
	}
	b := allotments(t, pool, "model", key)[0]
	if b.ReturnedAt == nil || b.Reason != "window_ended" || b.Used != 2 {
		t.Fatalf("block after Close: %+v; want returned, reason window_ended, used 2 (the request in flight at its estimate)", b)
	}
	s, err := l.Commit(ctx, inFlight, map[string]float64{ratelimit.MetricTokens: 5})
	if err != nil || s.Reservations[0].Settled {
		t.Fatalf("Commit after Close: %+v, %v; want not settled (charged at its estimate by the return)", s, err)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 2 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 2, nothing reserved", rows)
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}

// A block closed because the database's clock stepped back before its
// window waited for a request still in flight until that window was over
// on the stepped clock, plus allotStuckAfter: two hours and more after a
// step of two hours, its units held in the counter all along. It waits as
// one whose window ended does: until its window's end, as reckoned when it
// was taken, plus allotStuckAfter (here a second), on this host's clock.
func TestLocalBlockOfAWindowNotBegunGoesBackAfterItsWindowWithARequestInFlight(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const window = 4 * time.Second
	pgtest.AwaitRoomInWindow(t, pool, window, 3*time.Second)
	ctx := context.Background()
	var step atomic.Int64
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}),
		ratelimit.WithDBClockStep(func() time.Duration { return time.Duration(step.Load()) }),
		ratelimit.WithStuckAfter(time.Second))
	defer l.Close()
	key := uniqueKey("notbegunstuck")
	lim := localWindow(window, key, 1000, 2)
	start := time.Now()
	inFlight, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
	if err != nil || !inFlight.Reservations[0].Local {
		t.Fatalf("Reserve: %+v, %v; want a Local admission", inFlight, err)
	}
	step.Store(int64(-2 * time.Hour))
	awaitDBClockBefore(t, l, inFlight.Reservations[0].WindowStart) // the block closes
	// Its window ends within 4s of start, and the stuck wait is 1s; 5s more
	// for a loaded machine's housekeeping.
	var b dbtest.AllotmentListByScopeRow
	for deadline := start.Add(window + time.Second + 5*time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b = allotments(t, pool, "model", key)[0]; b.ReturnedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("block %+v not returned %s after it was taken, with a request in flight, once the database's clock stepped back before its window of %s",
				b, time.Since(start).Round(time.Millisecond), window)
		}
	}
	if b.Reason != "window_ended" || b.Used != 2 {
		t.Errorf("block returned with reason %q, used %g; want window_ended, used 2 (the request in flight at its estimate)", b.Reason, b.Used)
	}
	// Not before the wait was over (the database's clock did not step: the
	// step is the Limiter's reading of it), but for the estimate's lead.
	if early := b.ExpiresAt.Add(time.Second).Sub(*b.ReturnedAt); early > 10*time.Millisecond {
		t.Errorf("block returned at %s, %s before its window's end %s plus the stuck wait of 1s", b.ReturnedAt, early, b.ExpiresAt)
	}
	s, err := l.Commit(ctx, inFlight, map[string]float64{ratelimit.MetricTokens: 5})
	if err != nil || s.Reservations[0].Settled {
		t.Fatalf("Commit after the block went back: %+v, %v; want not settled (charged at its estimate by the return)", s, err)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 2 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 2, nothing reserved", rows)
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}
