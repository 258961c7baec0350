// Package grace bounds what an interrupted run (pgadmit bench, pgadmit demo) gives back before it
// returns: the grants and tasks it holds, and its Limiters' Local blocks and give-backs
// (Limiter.Close). A live server takes them back in milliseconds; a frozen one must not hold up a
// Ctrl-C for longer than the grace, and what it did not take back is then noted (LeftHeld).
package grace

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// ErrLeftHeld says that some of what a run held was not given back within its grace.
var ErrLeftHeld = errors.New("some of what it held was not given back in time: a lease's TTL, its window's end or 'pgadmit recover' frees it")

// Default is the grace of bench and demo: it ends 5 s after the interrupt.
const Default = 5 * time.Second

// Grace is the context of what a run gives back, and whether it left something held.
type Grace struct {
	ctx      context.Context
	end      context.CancelFunc
	leftHeld atomic.Bool
}

// After returns a Grace whose context ends d after ctx does, or at End: what a run that ctx
// ended gives back runs under it, long enough for a live server, bounded for a frozen one.
func After(ctx context.Context, d time.Duration) *Grace {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(d, cancel) })
	return &Grace{ctx: gctx, end: func() { stop(); cancel() }}
}

// Context ends the grace after the run's context.
func (g *Grace) Context() context.Context { return g.ctx }

// End ends the grace at once (once the run returned).
func (g *Grace) End() { g.end() }

// LeftHeld reports whether something was not given back within the grace.
func (g *Grace) LeftHeld() bool { return g.leftHeld.Load() }

// Do runs giveBack under the grace's context, and notes that something stays held when it fails.
func (g *Grace) Do(giveBack func(context.Context) error) error {
	err := giveBack(g.ctx)
	if err != nil {
		g.leftHeld.Store(true)
	}
	return err
}

// Release gives grant back on lim within the grace, and notes when it could not.
func (g *Grace) Release(lim *ratelimit.Limiter, grant ratelimit.Grant, reason string) error {
	if len(grant.Reservations) == 0 && len(grant.Leases) == 0 {
		return nil
	}
	return g.Do(func(ctx context.Context) error {
		_, err := lim.Release(ctx, grant, reason)
		return err
	})
}

// Wait runs f and waits for it no longer than the grace; it notes that something stays held,
// and reports false, when it gave up (f goes on in the background).
func (g *Grace) Wait(f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-g.ctx.Done():
		g.leftHeld.Store(true)
		return false
	}
}

// Close closes every Limiter of lims (returning their blocks, waiting for their give-backs),
// waiting for them no longer than the grace, and notes that something stays held when one of
// them lost something (ratelimit.Stats.Lost): a Reserve whose answer a frozen server kept, say,
// whose caller, interrupted meanwhile, knew of no grant to give back.
func (g *Grace) Close(lims ...*ratelimit.Limiter) {
	g.Wait(func() {
		for _, l := range lims {
			l.Close()
		}
	})
	for _, l := range lims {
		if l.Stats().Lost > 0 {
			g.leftHeld.Store(true)
		}
	}
}

// ClosePool closes pool as ClosePool does, with what the grace noted.
func (g *Grace) ClosePool(pool *pgxpool.Pool) { ClosePool(pool, g.LeftHeld()) }

// ClosePool closes pool, in the background when something was left held: a Limiter's Close
// given up on may still wait for the server on a connection, and the pool's Close waits for
// every connection, so the process exits without it.
func ClosePool(pool *pgxpool.Pool, leftHeld bool) {
	if leftHeld {
		go pool.Close()
		return
	}
	pool.Close()
}

// CloseWait is how long CloseOnExit waits for a pool once its command was interrupted.
const CloseWait = time.Second

// CloseOnExit closes pool, a command's last step. Once ctx ended (Ctrl-C, SIGTERM), it waits for
// that at most CloseWait: pgx closes the connection of a statement the interrupt cancelled and
// no answer came for (a frozen server) after a cancel request that waits up to 15 s for the
// server, and the pool's Close waits for that; the process exits without it. A pool of a live
// server closes in milliseconds either way.
func CloseOnExit(ctx context.Context, pool *pgxpool.Pool) {
	if ctx.Err() == nil {
		pool.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	select {
	case <-done:
	case <-time.After(CloseWait):
	}
}
