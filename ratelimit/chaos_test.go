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

// Every flow at once, over four pools: tasks with queue limits, admissions
// tied to their attempts, commits, releases, heartbeats and renewals,
// finished tasks, abandoned ones (their worker "dies"), and Recover and
// Prune sweeping meanwhile. No error but the expected refusals, no
// deadlock; at the end the committed usage is exactly what the callers were
// told, nothing is held, and the doctor finds the books balanced.
func TestEveryFlowAtOnce(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, gatewayInstances)
	ls := limitersOn(pools)
	ctx := context.Background()
	keys := []string{uniqueKey("key"), uniqueKey("key"), uniqueKey("key")}
	models := []string{uniqueKey("model"), uniqueKey("model")}
	team := uniqueKey("team")

	var mu sync.Mutex
	committed := map[string]float64{} // "key metric" -> actual amounts committed
	var finished, abandoned, refused atomic.Int64

	// expected reports whether err is an outcome the flow allows: a refusal,
	// or a claim lost because the task's lease lapsed and recovery took it.
	expected := func(err error) bool {
		return errors.Is(err, ratelimit.ErrExceeded) || errors.Is(err, ratelimit.ErrTaskFinished) ||
			errors.Is(err, ratelimit.ErrStaleToken) || errors.Is(err, ratelimit.ErrLeaseLost)
	}
	request := func(l *ratelimit.Limiter, rng *rand.Rand) error {
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "chaos", LeaseTTL: 2 * time.Second,
			QueueLimits: []ratelimit.Limit{queueLimit(team, 48)}})
		if err != nil {
			if expected(err) {
				refused.Add(1)
				return nil
			}
			return fmt.Errorf("CreateTask: %w", err)
		}
		key, model := keys[rng.IntN(len(keys))], models[rng.IntN(len(models))]
		limits := []ratelimit.Limit{
			window("api_key", key, "requests", 1e6, 1),
			window("api_key", key, "tokens", 1e9, 500),
			concurrent("model", model, 8),
		}
		rng.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })
		outcome := ratelimit.Outcome{Status: ratelimit.TaskSucceeded}
		grant, err := l.Reserve(ctx, task.ID, task.AttemptID, limits)
		switch {
		case err != nil && !expected(err):
			return fmt.Errorf("Reserve: %w", err)
		case err != nil:
			refused.Add(1)
			outcome = ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "rate_limited"}
		case rng.IntN(5) == 0:
			abandoned.Add(1) // the worker dies holding everything
			return nil
		case rng.IntN(3) == 0:
			if _, err := l.Release(ctx, grant, "upstream_error"); err != nil {
				return fmt.Errorf("Release: %w", err)
			}
			outcome = ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "upstream_error"}
		default:
			if rng.IntN(2) == 0 { // a long call heartbeats
				if _, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, 2*time.Second); err != nil && !expected(err) {
					return fmt.Errorf("HeartbeatTask: %w", err)
				}
				if _, err := l.RenewLeases(ctx, grant.Leases); err != nil && !expected(err) {
					return fmt.Errorf("RenewLeases: %w", err)
				}
			}
			tokens := float64(rng.IntN(900))
			s, err := l.Commit(ctx, grant, map[string]float64{"tokens": tokens})
			if err != nil {
				return fmt.Errorf("Commit: %w", err)
			}
			mu.Lock()
			for _, r := range s.Reservations {
				if r.Settled && r.Status == ratelimit.StatusCommitted {
					committed[key+" "+r.Metric] += r.Actual
				}
			}
			mu.Unlock()
		}
		if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, outcome); err != nil && !expected(err) {
			return fmt.Errorf("FinishTask: %w", err)
		}
		finished.Add(1)
		return nil
	}

	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweepErrs := make(chan error, 2)
	sweeps.Add(1)
	go func() { // a sweeper on its own pool, as `pgadmit recover --every` would run
		defer sweeps.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := ratelimit.NewMaintenance(pools[0]).Recover(ctx); err != nil {
				sweepErrs <- fmt.Errorf("Recover: %w", err)
				return
			}
			if _, err := ratelimit.NewMaintenance(pools[1]).Prune(ctx, time.Hour); err != nil {
				sweepErrs <- fmt.Errorf("Prune: %w", err)
				return
			}
		}
	}()
	hammer(t, ls, func(l *ratelimit.Limiter, worker int) error {
		rng := rand.New(rand.NewPCG(uint64(worker), 7))
		for range 12 {
			if err := request(l, rng); err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	sweeps.Wait()
	close(sweepErrs)
	for err := range sweepErrs {
		t.Error(err)
	}

	// The abandoned tasks' leases lapse; then recovery gives everything back.
	var clock testClock
	clock.pass(time.Now().Add(2500 * time.Millisecond))
	_, later := clocked(pools[2], &clock)
	if _, err := later.Recover(ctx); err != nil {
		t.Fatalf("final Recover: %v", err)
	}
	_, second := clocked(pools[3], &clock)
	if again, err := second.Recover(ctx); err != nil || !again.Zero() {
		t.Fatalf("second final Recover = %v, %v; want nothing left", again, err)
	}
	t.Logf("every flow at once: %d finished, %d abandoned, %d refused", finished.Load(), abandoned.Load(), refused.Load())
	if finished.Load() == 0 || abandoned.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the run should see finished, abandoned and refused requests")
	}
	assertSettled(t, pools[0], keys, models, committed)
	if s := summary(t, pools[0]); s.TasksRunning != 0 || s.Admissions != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 {
		t.Errorf("state left behind: %+v", s)
	}
	assertDoctorOK(t, pools[0])
}
