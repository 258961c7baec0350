package bench

import (
	"context"
	"errors"
	"net"
	"strconv"
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
	url := pgtest.NewURL(t)
	direct, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	f := freezer.New(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", f.Port()
	ratelimit.ConfigurePool(cfg) // as the CLI's pools are
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The pool's Close waits for the statements Run gave up on: the freezer drops them first.
	t.Cleanup(func() { f.Close(); pool.Close() })

	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	const grace = time.Second
	returned := make(chan error, 1)
	go func() {
		_, err := Run(ctx, pool, Config{Workers: 2, Duration: time.Minute, Think: 20 * time.Second, Only: []string{"W7"}, Grace: grace}, nil)
		returned <- err
	}()
	// Both workers hold a lease, in their pause.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		leases, err := db.New().InspectLeases(context.Background(), direct, db.InspectLeasesParams{MaxRows: 100})
		if err != nil {
			t.Fatal(err)
		}
		var live int64
		for _, l := range leases {
			live += l.LiveLeases
		}
		if live == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("W7's 2 workers never held their leases within 30s: %d live", live)
		}
	}
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
