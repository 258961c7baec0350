package bench

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress is how far a running workload has got (Config.Progress).
type Progress struct {
	Workload string        // its name, e.g. "W1 window, many keys"
	Round    int           // from 1
	Elapsed  time.Duration // since it started
	Total    time.Duration // how long it runs (W4: both its parts)
	Ops      int64         // operations decided so far, admitted or refused, as Result.Ops
	// OpsPerS is the ops/s since the last report (or the start): the current rate.
	OpsPerS float64
}

// opsCounter is one worker's count of decided operations, read by the progress reporter
// while the worker runs; padded to a cache line of its own, so that workers counting side by
// side do not slow each other down (W8 decides in a microsecond).
type opsCounter struct {
	atomic.Int64
	_ [56]byte
}

// length is how long the workload of code runs.
func (r *runner) length(code string) time.Duration {
	switch code {
	case "W4":
		return 2 * r.cfg.ExactnessDuration
	case "W5":
		return r.cfg.ExactnessDuration
	case "W9":
		return r.cfg.StrandingDuration()
	}
	return r.cfg.Duration
}

// watch resets the workers' counts and, with Config.Progress set, reports w's progress every
// Config.ProgressEvery until the returned stop is called; stop returns once the reporter has
// returned, so that nothing is reported after it. A workload shorter than the interval is
// not reported, nor is one whose time is up while its last operations end.
func (r *runner) watch(w Workload, round int) (stop func()) {
	for i := range r.counts {
		r.counts[i].Store(0)
	}
	if r.cfg.Progress == nil || r.cfg.ProgressEvery <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		last, lastOps := start, int64(0)
		tick := time.NewTicker(r.cfg.ProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				var ops int64
				for i := range r.counts {
					ops += r.counts[i].Load()
				}
				p := Progress{Workload: w.Name, Round: round, Elapsed: now.Sub(start), Total: r.length(w.Code), Ops: ops}
				if p.Elapsed >= p.Total {
					// Its time is up: the workers finish their last operations, and its row
					// comes next ("800ms of 700ms" would only say the machine is slow).
					continue
				}
				if d := now.Sub(last); d > 0 {
					p.OpsPerS = float64(ops-lastOps) / d.Seconds()
				}
				last, lastOps = now, ops
				r.cfg.Progress(p)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
