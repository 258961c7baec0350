package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The calls counted waiting in each combiner (CombinerStats.Waiting) go
// back to exactly 0 after a storm, and are never negative during it: 64
// callers on four Limiters over two pools (one set up with ConfigurePool),
// Reserve then Commit or Release, with contexts that never end, end before
// the call, time out at random (queued, in flight behind a row lock that
// comes and goes, or as the statement returns), or are cancelled as a
// Reserve statement returns; some limits Local, some on a hot counter and a
// concurrency scope (hot batches); Releases that the server rejects (their
// counter's reserved value corrupted to 0: a check constraint), which fail
// their combined batch and make it run again one call at a time; two of the
// Limiters closed while calls wait. Each Reserve statement runs with at
// least its calls counted waiting. Once every call returned and every
// Limiter is closed (no statement left running), each gauge reads 0.
func TestCombinedWaitingGaugeSurvivesACancellationStorm(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, 2)
	plain, admin := pools[0], pools[1]
	cfg := plain.Config()
	ratelimit.ConfigurePool(cfg)
	configured, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(configured.Close)
	ls := []*ratelimit.Limiter{
		ratelimit.New(plain),
		ratelimit.New(plain, ratelimit.WithCombining(4, 2), ratelimit.WithLeftStatementGrace(5*time.Millisecond)),
		ratelimit.New(configured, ratelimit.WithCombining(8, 1), ratelimit.WithLeftStatementGrace(20*time.Millisecond)),
		ratelimit.New(configured, ratelimit.WithCombining(16, 3), ratelimit.WithoutHotBatches()),
	}
	var (
		returning   cancelsAtReturn
		undercounts atomic.Int64 // Reserve statements that ran with fewer calls counted waiting than they carried
		undercount  atomic.Pointer[string]
	)
	for _, l := range ls {
		l.AfterReserveStatements(func(requests int) {
			if w := l.Stats().Reserve.Waiting; w < int64(requests) {
				undercounts.Add(1)
				msg := fmt.Sprintf("a Reserve statement of %d calls answered with %d counted waiting", requests, w)
				undercount.CompareAndSwap(nil, &msg)
			}
			returning.cancelAll()
		})
	}

	ctx := context.Background()
	hour := hourWindow(t, admin)
	hourly := func(l ratelimit.Limit) ratelimit.Limit { l.Window = hour; return l }
	hotKey := uniqueKey("hot")
	hot := hourly(window("provider", hotKey, "tokens", 1e12, 1))
	scope := concurrent("model", uniqueKey("model"), 1e6)
	local := hourly(window("api_key", uniqueKey("local"), "requests", 1e9, 1))
	local.Local = true
	if _, err := ls[0].Reserve(ctx, "", "", []ratelimit.Limit{hot}); err != nil { // the counter row the lock holder locks
		t.Fatal(err)
	}

	const workers = 64
	storm := 2 * time.Second
	if testing.Short() {
		storm = 500 * time.Millisecond
	}
	end := time.Now().Add(storm)
	stop := make(chan struct{})
	var background sync.WaitGroup

	// The counter of hot is locked for a few milliseconds at a time: the
	// statements on it wait, their callers leave while queued or in flight.
	background.Add(1)
	go func() {
		defer background.Done()
		rng := rand.New(rand.NewPCG(1, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Errorf("lock holder: %v", err)
				return
			}
			if _, err := testq.OpsLockScopeCounters(ctx, tx, dbtest.OpsLockScopeCountersParams{ScopeType: "provider", ScopeKey: hotKey}); err != nil {
				t.Errorf("lock holder: %v", err)
			}
			time.Sleep(time.Duration(1+rng.IntN(15)) * time.Millisecond) // how long the lock is held
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("lock holder: %v", err)
				return
			}
			time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
		}
	}()

	// Every gauge is sampled all along: none may read below 0.
	var negative atomic.Pointer[string]
	var most [2]atomic.Int64 // the highest Reserve and Settle readings
	background.Add(1)
	go func() {
		defer background.Done()
		for {
			for i, l := range ls {
				s := l.Stats()
				for k, w := range []int64{s.Reserve.Waiting, s.Settle.Waiting} {
					if w < 0 {
						msg := fmt.Sprintf("Limiter %d: %d Reserve, %d Settle calls counted waiting", i, s.Reserve.Waiting, s.Settle.Waiting)
						negative.CompareAndSwap(nil, &msg)
					}
					if w > most[k].Load() {
						most[k].Store(w)
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()

	// Two Limiters are closed while calls wait in them (they stay usable:
	// later Local limits are decided in the database).
	background.Add(1)
	go func() {
		defer background.Done()
		for i, l := range ls[1:3] {
			select {
			case <-stop:
				return
			case <-time.After(storm * time.Duration(i+1) / 3):
			}
			l.Close()
		}
	}()

	var calls, left, rejected atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			own := hourly(window("api_key", uniqueKey("own"), "requests", 1e9, 1))
			poison := hourly(window("api_key", uniqueKey("poison"), "requests", 1e9, 1))
			// check fails a call whose ctx never ended and that failed,
			// unless want says its error is the one it expects.
			check := func(what string, err error, ctx context.Context, want func(error) bool) {
				calls.Add(1)
				switch {
				case err == nil:
				case ctx.Err() != nil && errors.Is(err, ctx.Err()):
					left.Add(1)
				case want != nil && want(err):
				case ctx.Err() == nil:
					t.Errorf("worker %d: %s: %v", w, what, err)
				}
			}
			for time.Now().Before(end) {
				l := ls[rng.IntN(len(ls))]
				if rng.IntN(8) == 0 {
					// A Release the server rejects: its counter's reserved
					// value is 0, below what it gives back. (The corruption
					// itself is refused when a poison Release of this
					// worker's that its caller left was still in flight and
					// took the 1 back: the counter is at 0 all the same.)
					g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{poison})
					check("poison Reserve", err, ctx, nil)
					if err != nil {
						continue
					}
					if _, err := testq.OpsCounterCorruptAdd(ctx, admin, dbtest.OpsCounterCorruptAddParams{
						ScopeType: "api_key", ScopeKey: poison.Scope.Key, Metric: "requests", ReservedDelta: -1,
					}); err != nil && !isCheckViolation(err) {
						t.Errorf("worker %d: corrupt: %v", w, err)
						return
					}
					call, cancel := returning.callContext(rng)
					_, err = l.Release(call, g, "poison")
					cancel()
					if err == nil {
						t.Errorf("worker %d: a Release below its counter's reserved value succeeded", w)
					}
					check("poison Release", err, call, func(err error) bool {
						if isCheckViolation(err) {
							rejected.Add(1)
							return true
						}
						return false
					})
					continue
				}
				limits := []ratelimit.Limit{[]ratelimit.Limit{hot, own}[rng.IntN(2)]}
				if rng.IntN(3) == 0 {
					limits = append(limits, scope)
				}
				if rng.IntN(3) == 0 {
					limits = append(limits, local)
				}
				call, cancel := returning.callContext(rng)
				g, err := l.Reserve(call, "", "", limits)
				cancel()
				check("Reserve", err, call, nil)
				if err != nil {
					continue
				}
				call, cancel = returning.callContext(rng)
				if rng.IntN(2) == 0 {
					_, err = l.Commit(call, g, nil)
				} else {
					_, err = l.Release(call, g, "storm")
				}
				cancel()
				check("Commit or Release", err, call, nil)
			}
		}()
	}
	wg.Wait()
	close(stop)
	background.Wait()
	returning.cancelAll()
	for _, l := range ls {
		l.Close() // waits for the statements that every caller left
	}

	if msg := negative.Load(); msg != nil {
		t.Errorf("during the storm: %s", *msg)
	}
	if msg := undercount.Load(); msg != nil {
		t.Errorf("%d times, among them: %s", undercounts.Load(), *msg)
	}
	for i, l := range ls {
		if s := l.Stats(); s.Reserve.Waiting != 0 || s.Settle.Waiting != 0 {
			t.Errorf("Limiter %d, every call returned and closed: %d Reserve, %d Settle calls counted waiting; want 0",
				i, s.Reserve.Waiting, s.Settle.Waiting)
		}
	}
	var sum ratelimit.Stats
	for _, l := range ls {
		s := l.Stats()
		sum.Reserve, sum.Settle = sum.Reserve.Add(s.Reserve), sum.Settle.Add(s.Settle)
	}
	t.Logf("%d calls, %d left, %d Releases rejected; at most %d Reserve and %d Settle calls waiting; reserve %+v (%d hot); settle %+v (%d hot)",
		calls.Load(), left.Load(), rejected.Load(), most[0].Load(), most[1].Load(), sum.Reserve, sum.Reserve.Hot, sum.Settle, sum.Settle.Hot)
}

// isCheckViolation reports whether err is the server's check_violation.
func isCheckViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514"
}

// cancelsAtReturn cancels, as a Reserve statement returns, the contexts of
// the calls that asked to leave then.
type cancelsAtReturn struct {
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func (r *cancelsAtReturn) cancelAll() {
	r.mu.Lock()
	cancels := r.cancels
	r.cancels = nil
	r.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// callContext is a call's context: one that never ends, one ended before
// the call, one that times out within a few milliseconds (queued, in
// flight, or as its statement returns), or one cancelled as the next
// Reserve statement returns.
func (r *cancelsAtReturn) callContext(rng *rand.Rand) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	switch rng.IntN(10) {
	case 0, 1, 2:
		return ctx, func() {}
	case 3:
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx, cancel
	case 4, 5:
		ctx, cancel := context.WithCancel(ctx)
		r.mu.Lock()
		r.cancels = append(r.cancels, cancel)
		r.mu.Unlock()
		return ctx, cancel
	default:
		return context.WithTimeout(ctx, time.Duration(rng.IntN(6000))*time.Microsecond)
	}
}

// Behind a Reserve statement stuck on a row lock (its caller cannot leave),
// 200 callers queue and then leave: their requests are dropped from the
// queue in bulk (leftUnsent compacts it once most of it has gone), and the
// calls counted waiting fall from 204 to the 4 that still wait, the stuck
// one and three queued. A Close called then waits for them; once it
// returned, none is counted.
func TestCombinedWaitingGaugeThroughACompactedQueueAndClose(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithCombining(8, 1))
	ctx := context.Background()
	key := uniqueKey("compacted")
	limits := hourLimits(t, pool, window("api_key", key, "requests", 1e6, 1))
	if _, err := l.Reserve(ctx, "", "", limits); err != nil { // the counter row
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := testq.OpsLockScopeCounters(ctx, holder, dbtest.OpsLockScopeCountersParams{ScopeType: "api_key", ScopeKey: key}); err != nil {
		t.Fatal(err)
	}
	waiting := func(want int64, when string) {
		t.Helper()
		if s := l.Stats(); s.Reserve.Waiting != want || s.Settle.Waiting != 0 {
			t.Fatalf("%s: %d Reserve, %d Settle calls counted waiting; want %d and 0", when, s.Reserve.Waiting, s.Settle.Waiting, want)
		}
	}

	stay := make(chan error, 4)
	reserve := func(ctx context.Context, errs chan<- error) { _, err := l.Reserve(ctx, "", "", limits); errs <- err }
	go reserve(ctx, stay)
	pgtest.AwaitLockWaiterCount(t, pool, 1, "the stuck Reserve statement")
	const leaving = 200
	leavingCtx, leave := context.WithCancel(ctx)
	defer leave()
	left := make(chan error, leaving)
	for range leaving {
		go reserve(leavingCtx, left)
	}
	awaitQueuedReserves(t, l, leaving, "the callers who leave")
	for range 3 {
		go reserve(ctx, stay)
	}
	awaitQueuedReserves(t, l, leaving+3, "the callers who stay")
	waiting(leaving+4, "all queued")

	leave()
	for range leaving {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller who left: %v", err)
		}
	}
	if n := l.QueuedReserves(); n >= leaving {
		t.Errorf("%d requests still queued once %d of them had left: the queue was never compacted", n, leaving)
	}
	waiting(4, "once they left")

	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-stay; err != nil {
			t.Errorf("a caller who stayed: %v", err)
		}
	}
	<-closed
	waiting(0, "once closed")
}
