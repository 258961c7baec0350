package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A run interrupted while its server is frozen gives up giving back what its workers hold
// once its grace is over, and says so (ErrLeftHeld), rather than wait for each statement's own
// timeout: W7's Limiters return their Local blocks on Close, whose return waits 10 s on a server
// that does not answer, and a Ctrl-C then hung that long.
func TestRunInterruptedOnAFrozenServerGivesUpAfterItsGrace(t *testing.T) {
	t.Parallel()
	direct, pool, f := throughFreezer(t)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	const grace = time.Second
	returned := make(chan error, 1)
	go func() {
		_, err := Run(ctx, pool, Config{Workers: 2, Duration: time.Minute, Think: 20 * time.Second, Only: []string{"W7"}, Grace: grace}, nil)
		returned <- err
	}()
	awaitLiveLeases(t, direct, "W7's 2 workers in their pause", 2)
	// Their Reserves answered too (frozen as the leases turned visible, a Reserve's answer
	// could be lost, and its worker know of no lease to give back).
	f.AwaitQuiet(t, 300*time.Millisecond, 30*time.Second)
	f.Freeze()
	interrupted := time.Now()
	interrupt()
	select {
	case err := <-returned:
		took := time.Since(interrupted)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrLeftHeld) {
			t.Errorf("Run interrupted on a frozen server: %v, want context.Canceled and ErrLeftHeld", err)
		}
		// The grace, and a cancelled statement's wait for its cancel request (1.25 s at most),
		// with room for a loaded machine; below the 10 s of Close's block return alone.
		if took > 7*time.Second {
			t.Errorf("Run interrupted on a frozen server returned %s after the interrupt, want within its grace (%s) and a few seconds", took, grace)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run interrupted on a frozen server did not return within 60s")
	}
}

// A run interrupted while a frozen server keeps the answer of a Reserve it committed says that
// it left something held (ErrLeftHeld), well within its grace: the worker, interrupted, knows of
// no grant to give back, and its Limiter counts the Reserve as lost (ratelimit.Stats.Lost).
func TestRunInterruptedWithAReserveAnswerKeptSaysItLeftItHeld(t *testing.T) {
	t.Parallel()
	direct, pool, f := throughFreezer(t)
	// The pool's one connection, with W2's statement prepared on it (pgx prepares a statement
	// first: frozen, the prepare would get no answer, and the statement never go).
	lim := ratelimit.New(pool)
	warm := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "warm"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Minute},
		{Scope: ratelimit.Scope{Type: "model", Key: "warm"}, Metric: ratelimit.MetricConcurrent, Limit: 10, Amount: 1},
	}
	g, err := lim.Reserve(context.Background(), "", "", warm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Release(context.Background(), g, "warm-up"); err != nil {
		t.Fatal(err)
	}
	lim.Close()
	f.Freeze()
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	const grace = 30 * time.Second // not what ends the run
	returned := make(chan error, 1)
	go func() {
		_, err := Run(ctx, pool, Config{Workers: 1, Duration: time.Minute, Only: []string{"W2"}, Grace: grace}, nil)
		returned <- err
	}()
	awaitLiveLeases(t, direct, "W2's Reserve, its answer kept", 1)
	interrupted := time.Now()
	interrupt()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrLeftHeld) {
			t.Errorf("Run interrupted with a Reserve's answer kept: %v, want context.Canceled and ErrLeftHeld", err)
		}
		if took := time.Since(interrupted); took > grace/2 {
			t.Errorf("Run returned %s after the interrupt, want well within its grace (%s)", took, grace)
		}
	case <-time.After(2 * grace):
		t.Fatal("Run interrupted with a Reserve's answer kept did not return")
	}
}

// throughFreezer returns a pool on a fresh database whose connections go through a freezer,
// set up as the CLI's pools are, a pool straight to that database, and the freezer.
func throughFreezer(t *testing.T) (direct, pool *pgxpool.Pool, f *freezer.Freezer) {
	t.Helper()
	direct = pgtest.NewPool(t)
	f, pool = freezer.NewPool(t, direct.Config(), ratelimit.ConfigurePool)
	return direct, pool, f
}

// awaitLiveLeases waits until the database holds want live leases.
func awaitLiveLeases(t *testing.T, direct *pgxpool.Pool, what string, want int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		leases, err := db.New().InspectLeases(context.Background(), direct, db.InspectLeasesParams{MaxRows: 100})
		if err != nil {
			t.Fatal(err)
		}
		var live int64
		for _, l := range leases {
			live += l.LiveLeases
		}
		if live == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d live leases after 30s, want %d", what, live, want)
		}
	}
}
