package main

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The demo's cast: API keys on two plans and three models, with the limits a gateway would
// configure for them.

type demoPlan struct {
	name        string
	requestsMin float64 // requests per minute per key
	tokensMin   float64 // tokens per minute per key
}

var (
	planPro  = demoPlan{name: "pro", requestsMin: 60, tokensMin: 120_000}
	planFree = demoPlan{name: "free", requestsMin: 12, tokensMin: 8_000}
)

type demoKey struct {
	scope ratelimit.Scope
	plan  demoPlan
}

type demoModel struct {
	name        string
	share       float64 // of requests
	concurrent  float64 // concurrency limit, across every gateway instance
	minLatency  time.Duration
	maxLatency  time.Duration
	maxOutput   int // max_tokens of a request
	scope       ratelimit.Scope
	peak        atomic.Int64 // highest live lease count sampled from the database
	admitted    atomic.Int64
	refusedConc atomic.Int64
}

func demoModels(prefix string) []*demoModel {
	ms := []*demoModel{
		{name: "large", share: 0.30, concurrent: 10, minLatency: 400 * time.Millisecond, maxLatency: 1500 * time.Millisecond, maxOutput: 1024},
		{name: "medium", share: 0.40, concurrent: 14, minLatency: 150 * time.Millisecond, maxLatency: 700 * time.Millisecond, maxOutput: 512},
		{name: "small", share: 0.30, concurrent: 16, minLatency: 50 * time.Millisecond, maxLatency: 250 * time.Millisecond, maxOutput: 256},
	}
	for _, m := range ms {
		m.scope = ratelimit.Scope{Type: "model", Key: prefix + m.name, Name: m.name}
	}
	return ms
}

// instStats counts what one gateway instance did. Token totals are of committed requests.
type instStats struct {
	requests, admitted, completed, errors, lost atomic.Int64
	refusedRequests, refusedTokens, refusedConc atomic.Int64
	inFlight                                    atomic.Int64 // admitted, not yet settled
	tokensEstimated, tokensActual, overEstimate atomic.Int64
	firstErr                                    atomic.Pointer[string]
}

func (s *instStats) refused() int64 {
	return s.refusedRequests.Load() + s.refusedTokens.Load() + s.refusedConc.Load()
}

func (s *instStats) fail(err error) {
	s.errors.Add(1)
	msg := err.Error()
	s.firstErr.CompareAndSwap(nil, &msg)
}

// gateway is one gateway instance: its own pool, its own clients. Killing it cancels its
// context and closes its pool without any cleanup: its requests in flight are abandoned with
// their tasks running and their reservations and leases held, as when a process dies.
type gateway struct {
	d      *demo
	name   string
	pool   *pgxpool.Pool
	lim    *ratelimit.Limiter
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	st     instStats

	killed   atomic.Bool
	draining atomic.Bool

	mu       sync.Mutex
	inflight map[string]string // unfinished tasks this instance created → their execution token
	created  []pgtype.UUID     // every task this instance created
}

// start launches the instance's clients.
func (g *gateway) start(clients int) {
	for c := range clients {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			zipf := mrand.NewZipf(rng, 1.1, 2, uint64(len(g.d.keys)-1))
			for !g.draining.Load() && g.ctx.Err() == nil {
				g.request(rng, zipf)
			}
		}()
	}
}

// kill abandons everything the instance holds, then closes its pool; it returns the tasks that
// were in flight (created and not finished) when it died.
func (g *gateway) kill() map[string]string {
	g.killed.Store(true)
	g.cancel()
	g.wg.Wait() // the clients return at their next step, without cleanup
	g.pool.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// drain stops the clients after their current request, and closes the instance's Limiter (within
// the demo's grace once interrupted) and its pool.
func (g *gateway) drain() {
	g.draining.Store(true)
	g.d.grace.Wait(g.wg.Wait)
	g.d.grace.Close(g.lim)
	g.d.grace.ClosePool(g.pool)
}

// dead reports whether err is the instance dying under a request (its context cancelled).
func (g *gateway) dead(err error) bool {
	return err != nil && g.ctx.Err() != nil
}

// request plays one API request through the gateway: a sync task, admission against the key's
// requests/min and tokens/min and the model's concurrency, the upstream call (with execution
// lease heartbeats), commit with the actual token count, and the task's end.
func (g *gateway) request(rng *mrand.Rand, zipf *mrand.Zipf) {
	d := g.d
	i := int(zipf.Uint64())
	d.requested.mark(i)
	key := d.keys[i]
	model := d.pickModel(rng)
	prompt := 100 + rng.IntN(1900)
	maxOut := model.maxOutput
	estimate := prompt + maxOut
	// The reply uses part of max_tokens; now and then the prompt was tokenized longer than the
	// gateway estimated, and the request costs more than reserved.
	actual := prompt + maxOut/5 + rng.IntN(maxOut*4/5)
	if rng.IntN(25) == 0 {
		actual = estimate + 1 + rng.IntN(200)
	}
	latency := model.minLatency + time.Duration(rng.Int64N(int64(model.maxLatency-model.minLatency)))

	g.st.requests.Add(1)
	// Not cut off by a kill: a kill that landed after the server created the task would leave a
	// task that nobody tracks, and the crash report (which follows the tasks the instance knew
	// of) would miss it. The next step sees the kill. Nor by an interrupt, within its grace: the
	// interrupted demo finishes the tasks it tracks.
	task, err := g.lim.CreateTask(d.grace.Context(), ratelimit.TaskSpec{Kind: "chat", Worker: g.name, LeaseTTL: d.taskLease})
	if g.dead(err) {
		return
	}
	if err != nil {
		g.st.fail(fmt.Errorf("create task: %w", err))
		g.pause(100 * time.Millisecond)
		return
	}
	g.track(task.ID, task.ExecutionToken)

	grant, err := g.lim.Reserve(g.ctx, task.ID, task.AttemptID, []ratelimit.Limit{
		{Scope: key.scope, Metric: ratelimit.MetricRequests, Limit: key.plan.requestsMin, Amount: 1, Window: time.Minute, Policy: key.plan.name},
		{Scope: key.scope, Metric: ratelimit.MetricTokens, Limit: key.plan.tokensMin, Amount: float64(estimate), Window: time.Minute, Policy: key.plan.name},
		{Scope: model.scope, Metric: ratelimit.MetricConcurrent, Limit: model.concurrent, Amount: 1, LeaseTTL: d.leaseTTL},
	})
	if g.dead(err) {
		return
	}
	var exceeded *ratelimit.ExceededError
	if errors.As(err, &exceeded) {
		switch exceeded.Metric {
		case ratelimit.MetricRequests:
			g.st.refusedRequests.Add(1)
		case ratelimit.MetricTokens:
			g.st.refusedTokens.Add(1)
		default:
			g.st.refusedConc.Add(1)
			model.refusedConc.Add(1)
		}
		// The gateway answers 429 and records why; the client backs off a little.
		_, err := g.lim.FinishTask(g.ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{
			Status: ratelimit.TaskFailed, ErrorCode: "rate_limited", ErrorMessage: exceeded.Message, Retryable: exceeded.Retryable,
		})
		if g.dead(err) {
			return
		}
		if err != nil {
			g.st.fail(fmt.Errorf("finish refused task: %w", err))
		}
		g.untrack(task.ID)
		g.pause(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		return
	}
	if err != nil {
		g.st.fail(fmt.Errorf("reserve: %w", err))
		g.untrack(task.ID)
		g.pause(100 * time.Millisecond)
		return
	}
	g.st.admitted.Add(1)
	model.admitted.Add(1)
	g.st.inFlight.Add(1)

	// The upstream call. A long call heartbeats its task's execution lease every second.
	for left := latency; left > 0; {
		step := min(left, time.Second)
		if !g.pause(step) {
			return // killed mid-call: everything stays held
		}
		left -= step
		if left > 0 {
			if _, err := g.lim.HeartbeatTask(g.ctx, task.ID, task.ExecutionToken, d.taskLease); err != nil {
				if g.dead(err) {
					return
				}
				// Our claim is gone (recovery reclaimed the task): stop the call.
				g.st.lost.Add(1)
				g.st.inFlight.Add(-1)
				g.untrack(task.ID)
				return
			}
		}
	}

	// Commit and the task's end are not cut off by a kill either (the next step sees it): one
	// that landed after the server committed would leave the request out of the summary's
	// completed requests and tokens, which the database counts.
	_, err = g.lim.Commit(d.grace.Context(), grant, map[string]float64{ratelimit.MetricTokens: float64(actual)})
	if g.dead(err) {
		return
	}
	g.st.inFlight.Add(-1)
	if err != nil {
		g.st.fail(fmt.Errorf("commit: %w", err))
		g.untrack(task.ID)
		return
	}
	g.st.tokensEstimated.Add(int64(estimate))
	g.st.tokensActual.Add(int64(actual))
	if actual > estimate {
		g.st.overEstimate.Add(1)
	}
	_, err = g.lim.FinishTask(d.grace.Context(), task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if g.dead(err) {
		return
	}
	if err != nil {
		g.st.fail(fmt.Errorf("finish task: %w", err))
	} else {
		g.st.completed.Add(1)
	}
	g.untrack(task.ID)
	g.pause(time.Duration(rng.IntN(50)) * time.Millisecond)
}

// pause sleeps for d unless the instance dies first; it reports whether it slept through.
func (g *gateway) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-g.ctx.Done():
		return false
	}
}

func (g *gateway) track(taskID, token string) {
	var id pgtype.UUID
	_ = id.Scan(taskID)
	g.mu.Lock()
	g.inflight[taskID] = token
	g.created = append(g.created, id)
	g.mu.Unlock()
}

func (g *gateway) untrack(taskID string) {
	g.mu.Lock()
	delete(g.inflight, taskID)
	g.mu.Unlock()
}
