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

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The doctor reads one snapshot, so traffic in flight never looks like
// damage: while gateways on three pools admit (combined into hot batches on
// a few hot keys), commit, release, take and return blocks of Local limits,
// run tasks, die holding them, and Recover and Prune (on 2 s windows, with
// a 2 s cutoff and task retention) sweep behind them, Doctor runs again and
// again on a fourth pool and must report nothing at all.
func TestDoctorStaysCleanUnderTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4)
	ls := []*ratelimit.Limiter{
		ratelimit.New(pools[0]),
		ratelimit.New(pools[1]),
		ratelimit.New(pools[2], ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: 300 * time.Millisecond})),
	}
	t.Cleanup(ls[2].Close)
	maint := ratelimit.NewMaintenance(pools[3], ratelimit.WithTaskRetention(2*time.Second), ratelimit.WithPruneEvents(true))
	keys := []string{uniqueKey("hot"), uniqueKey("hot"), uniqueKey("cold")}
	model, team := uniqueKey("model"), uniqueKey("team")

	expected := func(err error) bool {
		return errors.Is(err, ratelimit.ErrExceeded) || errors.Is(err, ratelimit.ErrTaskFinished) ||
			errors.Is(err, ratelimit.ErrStaleToken) || errors.Is(err, ratelimit.ErrLeaseLost)
	}
	var requests, abandoned, local atomic.Int64
	request := func(l *ratelimit.Limiter, rng *rand.Rand, withLocal bool) error {
		key := keys[rng.IntN(len(keys))]
		limits := []ratelimit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 1e6, 1),
			window("api_key", key, ratelimit.MetricTokens, 40_000, float64(100+rng.IntN(400))),
			concurrent("model", model, 24),
		}
		limits[1].Window = 2 * time.Second // windows that end, and are pruned, during the run
		if withLocal {
			lim := window("provider", keys[0], ratelimit.MetricTokens, 1e6, float64(1+rng.IntN(50)))
			lim.Local, lim.Window = true, 2*time.Second
			limits = append(limits, lim)
			local.Add(1)
		}
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "doctor-traffic", LeaseTTL: 30 * time.Second,
			QueueLimits: []ratelimit.Limit{queueLimit(team, 40)}})
		if expected(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("CreateTask: %w", err)
		}
		requests.Add(1)
		outcome := ratelimit.Outcome{Status: ratelimit.TaskSucceeded}
		g, err := l.Reserve(ctx, task.ID, task.AttemptID, limits)
		switch {
		case err != nil && !expected(err):
			return fmt.Errorf("Reserve: %w", err)
		case err != nil:
			outcome = ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "rate_limited"}
		case rng.IntN(10) == 0:
			// The worker dies holding everything, its execution lease about
			// to lapse: Recover reclaims it. (It dies once admitted: a worker
			// whose lease lapses while its Reserve is in flight is reclaimed
			// as that Reserve commits, and until Recover's later steps
			// release what the Reserve took, the doctor rightly reports it.)
			abandoned.Add(1)
			if _, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Second); err != nil {
				return fmt.Errorf("HeartbeatTask: %w", err)
			}
			return nil
		case rng.IntN(4) == 0:
			if _, err := l.Release(ctx, g, "upstream_error"); err != nil {
				return fmt.Errorf("Release: %w", err)
			}
			outcome = ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "upstream_error"}
		default:
			if rng.IntN(3) == 0 {
				if _, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, 30*time.Second); err != nil && !expected(err) {
					return fmt.Errorf("HeartbeatTask: %w", err)
				}
				if _, err := l.RenewLeases(ctx, g.Leases); err != nil && !expected(err) {
					return fmt.Errorf("RenewLeases: %w", err)
				}
			}
			if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: float64(rng.IntN(600))}); err != nil {
				return fmt.Errorf("Commit: %w", err)
			}
		}
		if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, outcome); err != nil && !expected(err) {
			return fmt.Errorf("FinishTask: %w", err)
		}
		return nil
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bgErrs := make(chan error, 2)
	var doctorRuns, pruned atomic.Int64
	var mu sync.Mutex
	var dirty []ratelimit.Report
	bg.Add(2)
	go func() { // the sweeper, as `pgadmit recover --every` and a frequent prune
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			if _, err := maint.Recover(ctx); err != nil {
				bgErrs <- fmt.Errorf("Recover: %w", err)
				return
			}
			res, err := maint.Prune(ctx, 2*time.Second)
			if err != nil {
				bgErrs <- fmt.Errorf("Prune: %w", err)
				return
			}
			pruned.Add(res.Counters + res.Reservations + res.Tasks)
		}
	}()
	go func() { // the operator, running the doctor again and again
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			report, err := maint.Doctor(ctx)
			if err != nil {
				bgErrs <- fmt.Errorf("Doctor: %w", err)
				return
			}
			doctorRuns.Add(1)
			if !report.OK() {
				mu.Lock()
				dirty = append(dirty, report)
				mu.Unlock()
			}
		}
	}()

	// Five seconds of traffic, longer (up to a minute) until there was enough of it to mean
	// anything: on a loaded machine five seconds held four doctor runs (a run slowed to 1.5 s).
	deadline, hardStop := time.Now().Add(5*time.Second), time.Now().Add(time.Minute)
	enough := func() bool {
		return requests.Load() >= 100 && abandoned.Load() > 0 && local.Load() > 0 && doctorRuns.Load() >= 5 && pruned.Load() > 0
	}
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for worker := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(worker), 22))
			for time.Now().Before(deadline) || !enough() && time.Now().Before(hardStop) {
				if err := request(ls[worker%len(ls)], rng, worker%len(ls) == 2); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	close(bgErrs)
	for err := range errs {
		t.Error(err)
	}
	for err := range bgErrs {
		t.Error(err)
	}
	t.Logf("%d requests (%d with a Local limit, %d abandoned), %d doctor runs, %d rows pruned", requests.Load(), local.Load(), abandoned.Load(), doctorRuns.Load(), pruned.Load())
	if !enough() {
		t.Errorf("too little traffic or too few doctor runs to mean anything in a minute")
	}
	for i, r := range dirty {
		if i == 3 {
			t.Errorf("... and %d more reports with problems", len(dirty)-i)
			break
		}
		t.Errorf("doctor under traffic (%s): %s", r.CheckedAt.Format(time.RFC3339Nano), r)
	}

	// Once the abandoned tasks' leases lapse and recovery runs, and the
	// blocks go back, the books balance with nothing held.
	ls[2].Close()
	time.Sleep(1100 * time.Millisecond)
	if _, err := maint.Recover(ctx); err != nil {
		t.Fatalf("final Recover: %v", err)
	}
	assertDoctorOK(t, pools[3])
}
