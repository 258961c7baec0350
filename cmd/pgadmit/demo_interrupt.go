package main

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// reasonDemoInterrupted is recorded on the tasks an interrupted demo finishes.
const reasonDemoInterrupted = "interrupted"

// giveBack, once the demo is interrupted, stops every instance's clients, finishes the tasks
// they left unfinished (which releases their reservations and leases, and settles what a Reserve
// cut short wrote for them), and closes the Limiters, all within the demo's grace: otherwise a
// lease stayed held until its TTL (10 minutes), a reservation until its window ended. The killed
// instance's tasks too: the demo's run is over, and the sweeper that would have recovered them
// is stopped. The tasks are finished through the operator's pool, as the instances' pools of
// drained or killed instances are closed.
func (d *demo) giveBack(gws []*gateway) {
	d.grace.Wait(func() {
		for _, g := range gws {
			g.cancel()
			g.wg.Wait()
		}
	})
	ops := ratelimit.New(d.ops)
	var wg sync.WaitGroup
	for _, g := range gws {
		g.mu.Lock()
		tasks := maps.Clone(g.inflight)
		g.mu.Unlock()
		for id, token := range tasks {
			wg.Go(func() {
				_ = d.grace.Do(func(ctx context.Context) error {
					_, err := ops.FinishTask(ctx, id, token, ratelimit.Outcome{Status: ratelimit.TaskCancelled,
						ErrorCode: reasonDemoInterrupted, ErrorMessage: "pgadmit demo was interrupted"})
					var stale *ratelimit.StaleTokenError
					if errors.As(err, &stale) {
						return nil // finished already, or recovered: nothing held
					}
					return err
				})
			})
		}
	}
	d.grace.Wait(wg.Wait)
	lims := []*ratelimit.Limiter{ops}
	for _, g := range gws {
		if !g.killed.Load() && !g.draining.Load() { // a drained instance closed its own
			lims = append(lims, g.lim)
		}
	}
	d.grace.Close(lims...)
}
