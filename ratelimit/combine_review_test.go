package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A call whose ctx has already ended sends nothing, combined or not, as
// Reserve's doc says ("a request not yet sent is never sent"): the
// combiner sent it with the ctx's cancellation stripped, the server
// admitted it, and the grant was released as abandoned in the background,
// holding capacity meanwhile that live callers could have been refused
// for. Commit and Release likewise: alone, pgx refuses an ended ctx before
// it writes; combined, the settlement was sent all the same.
func TestCallWithAnEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"combined", nil},
		{"combined two in flight", []ratelimit.Option{ratelimit.WithCombining(8, 2)}},
		{"alone", []ratelimit.Option{ratelimit.WithoutCombining()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			l := ratelimit.New(pool, tc.opts...)
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			key := uniqueKey("ended")
			limits := []ratelimit.Limit{window("api_key", key, "tokens", 100, 1), concurrent("model", key, 5)}
			for _, ls := range [][]ratelimit.Limit{limits[:1], limits} { // reserveOne and pgadmit_reserve
				if g, err := l.Reserve(ended, "", "", ls); !errors.Is(err, context.Canceled) || len(g.Reservations) > 0 {
					t.Fatalf("Reserve with an ended ctx: %+v, %v; want context.Canceled", g, err)
				}
			}
			g, err := l.Reserve(context.Background(), "", "", limits)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Commit(ended, g, nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit with an ended ctx: %v; want context.Canceled", err)
			}
			if _, err := l.Release(ended, g, "ended"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Release with an ended ctx: %v; want context.Canceled", err)
			}
			l.Close()
			s := summary(t, pool)
			if n := rowCounts(t, pool).Reservations; n != 1 || s.ReservationsOpen != 1 || s.LeasesUnreleased != 1 {
				t.Errorf("%d reservations (%d open, %d released, %d committed), %d unreleased leases; want the one live caller's grant, open",
					n, s.ReservationsOpen, s.ReservationsReleased, s.ReservationsCommitted, s.LeasesUnreleased)
			}
		})
	}
}

// Bad input sent at the same time as good requests, on one counter, by
// several instances (one combining two batches in flight, one not
// combining): each bad call is refused with a *ValidationError and writes
// nothing, and the good ones around it are decided as if it had not come:
// exactly the limit's worth admitted, in unit amounts, and committed with
// good actual amounts while bad Commits of the same grants are refused and
// settle nothing.
func TestBadInputAmongCombinedCallsFailsAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ls := []*ratelimit.Limiter{ratelimit.New(pool), ratelimit.New(pool, ratelimit.WithCombining(8, 2)), ratelimit.New(pool, ratelimit.WithoutCombining())}
	hour := hourWindow(t, pool) // an hour or a few minutes more: every good call meets on one counter row
	key := uniqueKey("mixed")
	const limit, workers, calls = 150, 18, 12 // 216 good calls for 150 units
	good := func(amount float64) ratelimit.Limit {
		l := window("api_key", key, "tokens", limit, amount)
		l.Window = hour
		return l
	}
	bads := []ratelimit.Limit{good(math.NaN()), good(math.Inf(1)), good(-1), good(ratelimit.MaxAmount * 2), good(1e-12),
		window("api_key", "", "tokens", limit, 1), window("api_key", " ", "tokens", limit, 1), window("api_key", key, "", limit, 1)}
	bads[0].Window, bads[5].Window = hour, hour
	var admitted, refused, committed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			l := ls[w%len(ls)]
			ctx := context.Background()
			<-start
			for i := range calls {
				if rng.IntN(2) == 0 { // a bad call next to the good ones
					bad := bads[rng.IntN(len(bads))]
					_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{good(1), bad}[rng.IntN(2):])
					var v *ratelimit.ValidationError
					if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &v) {
						t.Errorf("Reserve of %+v: %v, want a *ValidationError", bad, err)
					}
				}
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{good(1)})
				if errors.Is(err, ratelimit.ErrExceeded) {
					refused.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("worker %d call %d: %v", w, i, err)
					continue
				}
				admitted.Add(1)
				actual := []float64{math.NaN(), math.Inf(-1), -2, 3e15}[rng.IntN(4)]
				if _, err := l.Commit(ctx, g, map[string]float64{"tokens": actual}); !errors.Is(err, ratelimit.ErrInvalidInput) {
					t.Errorf("Commit with actual %v: %v, want ErrInvalidInput", actual, err)
				}
				s, err := l.Commit(ctx, g, map[string]float64{"tokens": 1})
				if err != nil || !s.Reservations[0].Settled {
					t.Errorf("Commit: %+v, %v", s, err)
					continue
				}
				committed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, l := range ls {
		l.Close()
	}
	// Each admission of 1 was committed as 1: exactly the limit's worth.
	if admitted.Load() != limit || admitted.Load()+refused.Load() != workers*calls {
		t.Errorf("%d admitted, %d refused of %d; want %d admitted", admitted.Load(), refused.Load(), workers*calls, limit)
	}
	rows := counterRows(t, pool, "api_key", key)
	if len(rows) != 1 || rows[0].UsedValue != float64(committed.Load()) || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used %d, nothing reserved", rows, committed.Load())
	}
	if n := rowCounts(t, pool).Reservations; n != admitted.Load() {
		t.Errorf("%d reservations written, want the %d admitted", n, admitted.Load())
	}
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}

// A queued Reserve whose ctx has ended when its batch is taken, before its
// caller's goroutine ran to withdraw it, writes nothing: the batch leaves
// it out, and the calls queued around it are admitted. It was sent, and
// its grant written and then released as abandoned, holding its capacity
// for nobody meanwhile.
func TestCombinedCallWhoseCtxEndedBeforeItsBatchIsLeftOut(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	// A statement in flight, stuck behind a row lock that a transaction
	// holds, so that the calls queued next go together in one batch.
	blocker := hourLimits(t, pool, window("api_key", uniqueKey("blocker"), "requests", 100, 1))
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := l.WithTx(holder).Reserve(ctx, "", "", blocker); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := l.Reserve(ctx, "", "", blocker); stuck <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the first statement")

	keys := []string{uniqueKey("before"), uniqueKey("ended"), uniqueKey("after")}
	admitted := make(chan error, 2)
	reserve := func(key string) {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 100, 1)})
		if err == nil && len(g.Reservations) != 1 {
			err = fmt.Errorf("grant %+v", g)
		}
		admitted <- err
	}
	go reserve(keys[0])
	awaitQueuedReserves(t, l, 1, "the first call")
	ended, end := context.WithCancel(ctx)
	end()
	if err := l.QueueUnnoticedReserve(ended, []ratelimit.Limit{window("api_key", keys[1], "requests", 100, 1)}); err != nil {
		t.Fatal(err)
	}
	go reserve(keys[2])
	awaitQueuedReserves(t, l, 3, "the last call")
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatalf("the first statement: %v", err)
	}
	for range 2 {
		if err := <-admitted; err != nil {
			t.Errorf("a call queued beside the ended one: %v", err)
		}
	}
	l.Close() // waits for what went to abandoned to be given back
	if rows := counterRows(t, pool, "api_key", keys[1]); len(rows) != 0 {
		t.Errorf("the ended call's counter: %+v, want none", rows)
	}
	for _, key := range []string{keys[0], keys[2]} {
		if rows := counterRows(t, pool, "api_key", key); len(rows) != 1 || rows[0].ReservedValue != 1 {
			t.Errorf("counter of %s: %+v, want 1 reserved", key, rows)
		}
	}
	if n := rowCounts(t, pool).Reservations; n != 3 {
		t.Errorf("%d reservations, want 3 (the first statement's and the two live calls')", n)
	}
	if s := l.Stats().Reserve; s.Batches != 2 || s.Requests != 3 || s.Waiting != 0 {
		t.Errorf("stats %+v, want 2 statements of 3 calls, none waiting", s)
	}
}
