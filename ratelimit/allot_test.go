package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// localWindow is a Local window limit of length hour. A test of it takes
// hour from hourWindow (an hour, or a few minutes more, whose current window
// has a minute left), once, for all its Local limits, so that they do not
// straddle two of their windows.
func localWindow(hour time.Duration, key string, limit, amount float64) ratelimit.Limit {
	w := window("model", key, ratelimit.MetricTokens, limit, amount)
	w.Local = true
	w.Window = hour
	return w
}

// blockCountingLimiter returns a Limiter on a new database, the length of
// its Local windows (hourWindow), and the count of its block requests
// (AllotmentTake); the Limiter is closed when the test ends.
func blockCountingLimiter(t *testing.T) (*ratelimit.Limiter, *pgxpool.Pool, *statementCounter, time.Duration) {
	t.Helper()
	pool, takes := countingPool(t, "AllotmentTake")
	hour := hourWindow(t, pool)
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	return l, pool, takes, hour
}

// localLimiter returns a Limiter whose blocks stay open while the test
// runs (IdleAfter a minute), on a new database, and the length of its
// Local windows (hourWindow); it is closed when the test ends.
func localLimiter(t *testing.T) (*ratelimit.Limiter, *pgxpool.Pool, time.Duration) {
	t.Helper()
	return localLimiterIdleAfter(t, time.Minute)
}

// localLimiterIdleAfter is localLimiter with blocks returned once idle
// for idle.
func localLimiterIdleAfter(t *testing.T, idle time.Duration) (*ratelimit.Limiter, *pgxpool.Pool, time.Duration) {
	t.Helper()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: idle}))
	t.Cleanup(l.Close)
	return l, pool, hour
}

// lockBoundedPools makes a database and two pools on it, closed when the
// test ends: bounded, whose sessions give up a lock wait after 300 ms
// (lock_timeout), for the Limiter whose statements should fail so, and
// admin, with no bound, to hold the locks they meet and read the outcome.
func lockBoundedPools(t *testing.T) (bounded, admin *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "300ms"
	bounded, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bounded.Close)
	return bounded, pgtest.OpenPool(t, url)
}

// reserveLocal reserves amount of a localWindow of length hour, failing the
// test unless it is admitted from a block.
func reserveLocal(t *testing.T, l *ratelimit.Limiter, hour time.Duration, key string, limit, amount float64) ratelimit.Grant {
	t.Helper()
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, key, limit, amount)})
	if err != nil || !g.Reservations[0].Local {
		t.Fatalf("Reserve of %g: %+v, %v; want a Local admission", amount, g, err)
	}
	return g
}

// lostBlock has a holder that stops reporting take a block of
// localWindow(hour, key, 1000, ...), hour from hourWindow, and returns the
// block and a time on clock past its window's end and the grace, when
// Recover returns it and the doctor names it. The holder is closed when the
// test ends.
func lostBlock(t *testing.T, pool *pgxpool.Pool, hour time.Duration, key string) (dbtest.AllotmentListByScopeRow, time.Time) {
	t.Helper()
	holder := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Hour}))
	t.Cleanup(holder.Close)
	reserveLocal(t, holder, hour, key, 1000, 10)
	open := openBlocks(t, pool, key)
	if len(open) != 1 {
		t.Fatalf("open blocks = %d, want 1", len(open))
	}
	return open[0], open[0].ExpiresAt.Add(ratelimit.DefaultLostAllotmentGrace + time.Minute)
}

// openBlocks reads the blocks of the Local limits of key not returned yet.
func openBlocks(t *testing.T, conn db.DBTX, key string) []dbtest.AllotmentListByScopeRow {
	t.Helper()
	var open []dbtest.AllotmentListByScopeRow
	for _, b := range allotments(t, conn, "model", key) {
		if b.ReturnedAt == nil {
			open = append(open, b)
		}
	}
	return open
}

// allotments reads every block of a scope.
func allotments(t *testing.T, conn db.DBTX, scopeType, key string) []dbtest.AllotmentListByScopeRow {
	t.Helper()
	rows, err := testq.AllotmentListByScope(context.Background(), conn, dbtest.AllotmentListByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// A Local limit is admitted from a block reserved in its counter: no
// reservation row per request, the block recorded for a DBA, and on close
// the block returned with what was really used.
func TestLocalLimitAdmitsFromABlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Holder: "test-holder"}))
	key := uniqueKey("local")
	var grants []ratelimit.Grant
	for range 50 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
		if err != nil {
			t.Fatal(err)
		}
		r := g.Reservations[0]
		if !r.Local || r.ID != "" || r.Allotment == "" {
			t.Fatalf("reservation %+v, want a Local one naming its block", r)
		}
		grants = append(grants, g)
	}
	if n := rowCounts(t, pool).Reservations; n != 0 {
		t.Fatalf("%d reservation rows, want none for Local admissions", n)
	}
	blocks := allotments(t, pool, "model", key)
	granted := 0.0
	for _, b := range blocks {
		if b.Holder != "test-holder" || b.ReturnedAt != nil {
			t.Fatalf("block %+v, want open and held by test-holder", b)
		}
		granted += b.Granted
	}
	if granted < 50 || granted > 50+1000*ratelimit.DefaultAllotmentMaxShare*2 {
		t.Fatalf("blocks grant %g, want at least the 50 admitted and at most two blocks of a share more", granted)
	}
	assertDoctorOK(t, pool) // the counter reserves the open blocks (one snapshot: a block may be taken meanwhile)
	for i, g := range grants {
		actual := 2.0
		if i%10 == 0 {
			s, err := l.Release(ctx, g, "client_gone")
			if err != nil || !s.Reservations[0].Settled {
				t.Fatalf("Release: %+v, %v", s, err)
			}
			continue
		}
		s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: actual})
		if err != nil || !s.Reservations[0].Settled || s.Reservations[0].Actual != actual {
			t.Fatalf("Commit: %+v, %v", s, err)
		}
		if again, err := l.Commit(ctx, g, nil); err != nil || !again.AlreadySettled() {
			t.Fatalf("second Commit: %+v, %v; want a no-op", again, err)
		}
	}
	l.Close()
	used := 0.0
	for _, b := range allotments(t, pool, "model", key) {
		if b.ReturnedAt == nil {
			t.Fatalf("block %+v still open after Close", b)
		}
		used += b.Used
	}
	if used != 45*2 {
		t.Fatalf("blocks charged %g, want 90 (45 commits of 2; 5 released)", used)
	}
	if rows := counterRows(t, pool, "model", key); rows[0].ReservedValue != 0 || rows[0].UsedValue != 90 {
		t.Fatalf("counter %+v after Close, want used 90, reserved 0", rows[0])
	}
	assertDoctorOK(t, pool)
	// Closed: Local limits are decided in the database now.
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if err != nil || g.Reservations[0].Local || g.Reservations[0].ID == "" {
		t.Fatalf("Reserve after Close: %+v, %v; want a reservation row", g, err)
	}
}

// A Local limit a block cannot serve (an amount above a block's share of
// the limit) is decided in the database, exactly, in the same call as the
// other limits; and a Local limit inside a caller's transaction too.
func TestLocalLimitFallsBackToTheDatabase(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	defer l.Close()
	key := uniqueKey("big")
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 100), window("api_key", key, "requests", 10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Reservations[0].Local || g.Reservations[0].ID == "" || len(allotments(t, pool, "model", key)) != 0 {
		t.Fatalf("grant %+v: an amount above a block's share should be reserved in the database", g)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	g, err = l.WithTx(tx).Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if err != nil || g.Reservations[0].Local {
		t.Fatalf("Reserve in a transaction: %+v, %v; want a reservation row", g, err)
	}
}

// Local admissions are all or nothing with the limits the database
// decides: when one of those refuses, the local units go back to the block.
func TestLocalUnitsGoBackWhenTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	defer l.Close()
	key := uniqueKey("mixed")
	full := window("api_key", key, "requests", 0, 1)
	for range 20 {
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 10), full})
		if !errors.Is(err, ratelimit.ErrExceeded) {
			t.Fatalf("Reserve: %v, want refused by the full requests window", err)
		}
	}
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Reservations[0].Remaining+10 != sumGranted(t, pool, key) {
		t.Fatalf("block remaining %g after one admission of 10 of %g granted: the refused ones kept units", g.Reservations[0].Remaining, sumGranted(t, pool, key))
	}
}

func sumGranted(t *testing.T, conn db.DBTX, key string) float64 {
	t.Helper()
	sum := 0.0
	for _, b := range allotments(t, conn, "model", key) {
		if b.ReturnedAt == nil {
			sum += b.Granted
		}
	}
	return sum
}

// Many instances admitting from blocks of one window never admit more
// than its limit together; once they close, the counter equals what they
// charged, no block is above its share of the limit, and what sat unused
// in blocks while others were refused (the run must see refusals) stays
// within the documented bound.
func TestLocalLimitIsExactAcrossInstances(t *testing.T) {
	t.Parallel()
	const instances, workers, limit = 4, 8, 400
	pools := pgtest.NewPools(t, instances)
	hour := hourWindow(t, pools[0])
	key := uniqueKey("shared")
	ctx := context.Background()
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	limiters := make([]*ratelimit.Limiter, instances)
	for i := range limiters {
		limiters[i] = ratelimit.New(pools[i])
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for w := range instances * workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[w%instances]
			for time.Now().Before(deadline) {
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, limit, 1)})
				if errors.Is(err, ratelimit.ErrExceeded) {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := l.Commit(ctx, g, nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A window of the test may have ended meanwhile: count per window.
	perWindow := map[time.Time]float64{}
	unused := 0.0
	for _, l := range limiters {
		l.Close()
	}
	for _, b := range allotments(t, pools[0], "model", key) {
		perWindow[b.WindowStart] += b.Used
		unused += max(b.Granted-b.Used, 0)
		if share := limit * ratelimit.DefaultAllotmentMaxShare; b.Granted > share {
			t.Errorf("block %s granted %g, above its share of the limit (%g)", b.ID, b.Granted, share)
		}
	}
	totals, err := testq.ReservationTotalsByScope(ctx, pools[0], dbtest.ReservationTotalsByScopeParams{ScopeType: "model", ScopeKey: key})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range totals { // what was decided in the database near the end of a window
		perWindow[r.WindowStart] += r.CommittedAmount
	}
	for _, r := range counterRows(t, pools[0], "model", key) {
		if r.UsedValue > limit || r.ReservedValue != 0 {
			t.Errorf("window %s: used %g, reserved %g; want at most %d used, nothing reserved", r.WindowStart, r.UsedValue, r.ReservedValue, limit)
		}
	}
	total := 0.0
	for _, v := range perWindow {
		total += v
	}
	if int(total) != admitted {
		t.Errorf("blocks and reservations charged %g, but %d requests were admitted", total, admitted)
	}
	bound := instances * 2 * limit * ratelimit.DefaultAllotmentMaxShare
	t.Logf("admitted %d, refused %d in %d window(s); units left unused in blocks: %g (bound %g)", admitted, refused, len(perWindow), unused, bound)
	if refused == 0 {
		t.Errorf("admitted %d and refused nothing: the limit of %d never bound", admitted, limit)
	}
	if len(perWindow) == 1 && float64(admitted) < limit-bound {
		t.Errorf("admitted %d of %d while refusing: more than the bound of %g sat in blocks", admitted, limit, bound)
	}
	assertBooksBalance(t, pools[0], "model", key)
	assertDoctorOK(t, pools[0])
}

// A holder reports, every second, what its open blocks admitted: the
// actual amounts of what was committed and the estimates of what is still
// in flight, which is what Recover charges should the holder die.
func TestLocalBlockReportsWhatItAdmitted(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("report")
	var grants []ratelimit.Grant
	for range 5 {
		grants = append(grants, reserveLocal(t, l, hour, key, 1000, 3))
	}
	for _, g := range grants[:2] {
		if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	const want = 2*1 + 3*3 // two committed at 1, three in flight at their estimate of 3
	consumed := 0.0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		consumed = 0
		for _, b := range allotments(t, pool, "model", key) {
			if b.ReturnedAt == nil {
				consumed += b.Consumed
			}
		}
		if consumed == want {
			break
		}
	}
	if consumed != want {
		t.Fatalf("open blocks report %g consumed, want %d", consumed, want)
	}
	for _, g := range grants[2:] {
		if _, err := l.Release(ctx, g, "client_gone"); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	assertBooksBalance(t, pool, "model", key)
	if rows := counterRows(t, pool, "model", key); rows[0].UsedValue != 2 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v after Close, want used 2, reserved 0", rows[0])
	}
}

// Close returns every block, also one being taken ahead (prefetched off
// the request's path) at the moment Close runs.
func TestCloseReturnsABlockTakenMeanwhile(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	ctx := context.Background()
	for i := range 20 {
		l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
		key := uniqueKey("closing")
		// The first block is 16 units for amount 1; past half of it the
		// next one is taken ahead, and Close follows at once.
		for range 9 {
			if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)}); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		if open := openBlocks(t, pool, key); len(open) > 0 {
			t.Fatalf("round %d: block %+v still open after Close", i, open[0])
		}
		assertBooksBalance(t, pool, "model", key)
	}
	assertDoctorOK(t, pool)
}
