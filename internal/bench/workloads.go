package bench

import (
	"context"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Never-reached limits: far above what any benchmark can admit in a window.
const (
	unlimitedRequests = 1e9
	unlimitedTokens   = 1e12
)

// key is the scope key name in this run; keyN is name followed by n (one of many keys).
func (r *runner) key(name string) string { return r.prefix + "-" + name }

func (r *runner) keyN(name string, n int) string { return r.prefix + "-" + name + strconv.Itoa(n) }

func (r *runner) w1(ctx context.Context) (Result, error) {
	return r.checkingBooks(ctx, limitBooks("api keys", requestsLimit(r.key("k"))), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, []ratelimit.Limit{requestsLimit(r.keyN("k", rng.IntN(10_000)))}, nil)
		})
	})
}

func (r *runner) w2(ctx context.Context) (Result, error) {
	return r.checkingBooks(ctx, r.requestBooks("k", "m"), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, r.requestLimits(rng, "k", "m"), gatewayActual)
		})
	})
}

// requestLimits are the limits of one W2 request (and of T1's task's): the requests/min and
// tokens/min of one of 1,000 API keys named key, and the concurrency of one of 5 models named
// model.
func (r *runner) requestLimits(rng *mrand.Rand, key, model string) []ratelimit.Limit {
	apiKey := ratelimit.Scope{Type: "api_key", Key: r.keyN(key, rng.IntN(1_000))}
	m := ratelimit.Scope{Type: "model", Key: r.keyN(model, rng.IntN(5))}
	return []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute},
		{Scope: m, Metric: ratelimit.MetricConcurrent, Limit: 1_000, Amount: 1},
	}
}

// requestBooks are the books of requestLimits' scopes: the API keys charged a request and its
// actual tokens each, the models' leases all given back.
func (r *runner) requestBooks(key, model string) []booked {
	return []booked{
		gatewayKeyBooks(r.key(key)),
		{label: "models", scopes: scopeSet{"model", r.key(model)}, leases: true},
	}
}

func (r *runner) w3(ctx context.Context) (Result, error) {
	limits := []ratelimit.Limit{requestsLimit(r.key("hot"))}
	return r.checkingBooks(ctx, limitBooks("api key", limits[0]), func() (Result, error) {
		return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommit(ctx, worker, rng, limits, nil)
		})
	})
}

func (r *runner) w5(ctx context.Context) (Result, error) {
	a, b := requestsLimit(r.key("w5-a")), requestsLimit(r.key("w5-b"))
	ab, ba := []ratelimit.Limit{a, b}, []ratelimit.Limit{b, a}
	// Both keys begin with "w5-": each admission charges a request to each.
	books := []booked{{label: "api keys", window: time.Minute, scopes: scopeSet{"api_key", r.key("w5-")}, charged: map[string]float64{ratelimit.MetricRequests: 2}}}
	res, err := r.checkingBooks(ctx, books, func() (Result, error) {
		return r.measure(ctx, r.cfg.ExactnessDuration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			if worker%2 == 0 {
				return r.reserveCommit(ctx, worker, rng, ab, nil)
			}
			return r.reserveCommit(ctx, worker, rng, ba, nil)
		})
	})
	res.Checks = append(res.Checks, Check{Name: "deadlock errors (SQLSTATE 40P01)", Want: 0, Got: res.Deadlocks, OK: res.Deadlocks == 0})
	return res, err
}

// limitBooks are the books of a workload whose admissions each take one
// window limit, limit, and commit its amount: those of the scopes of its
// type whose keys begin with its key (W1's limits are limit on keys that
// begin with it; W3's, W8's and W9's are limit itself). label names them.
func limitBooks(label string, limit ratelimit.Limit) []booked {
	return []booked{{label: label, window: limit.Window, scopes: scopeSet{limit.Scope.Type, limit.Scope.Key}, charged: map[string]float64{limit.Metric: limit.Amount}}}
}

// requestsLimit is W1's limit: requests in a 60 s window, never reached.
func requestsLimit(key string) ratelimit.Limit {
	return ratelimit.Limit{
		Scope:  ratelimit.Scope{Type: "api_key", Key: key},
		Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute,
	}
}

// errCommit marks an error of Commit after an admitted Reserve: the admission counts, the
// error too.
type errCommit struct{ err error }

func (e errCommit) Error() string { return "commit: " + e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }
func (errCommit) afterAdmission() {}

// afterAdmission is an error that came after an admitted Reserve (errCommit, errTaskStep):
// drive counts the admission, and the error too.
type afterAdmission interface {
	error
	afterAdmission()
}

// limiters returns one Limiter per instance, on the workers' pool.
func (r *runner) limiters() []*ratelimit.Limiter {
	return r.limitersN(r.cfg.Instances)
}

// limitersN is n new Limiters, as limiters makes them.
func (r *runner) limitersN(n int) []*ratelimit.Limiter {
	lims := make([]*ratelimit.Limiter, n)
	for i := range lims {
		lims[i] = ratelimit.New(r.pool, r.cfg.Options...)
	}
	return lims
}

// instance is the Limiter, among lims (one per instance), that worker calls.
func instance(lims []*ratelimit.Limiter, worker int) *ratelimit.Limiter {
	return lims[worker%len(lims)]
}

// reserveCommit reserves limits and commits the grant with actual amounts.
func (r *runner) reserveCommit(ctx context.Context, worker int, rng *mrand.Rand, limits []ratelimit.Limit, actual map[string]float64) error {
	return r.reserveCommitOn(ctx, r.lims, worker, rng, limits, actual)
}

// reserveCommitOn reserves limits on the worker's instance among lims, pauses
// for the think time, and commits the grant with actual amounts.
func (r *runner) reserveCommitOn(ctx context.Context, lims []*ratelimit.Limiter, worker int, rng *mrand.Rand, limits []ratelimit.Limit, actual map[string]float64) error {
	lim := instance(lims, worker)
	g, err := lim.Reserve(ctx, "", "", limits)
	if err != nil {
		return err
	}
	r.think(ctx, worker, rng)
	if ctx.Err() != nil {
		// Interrupted in the pause, as a gateway whose upstream call was cut off: the grant
		// goes back now, not at its lease's TTL or its window's end.
		_ = r.grace.Release(lim, g, reasonInterrupted)
		return ctx.Err()
	}
	if _, err := lim.Commit(ctx, g, actual); err != nil {
		if ctx.Err() != nil {
			// Interrupted mid-Commit, the grant settled or not: Release settles what is open.
			_ = r.grace.Release(lim, g, reasonInterrupted)
		}
		return errCommit{err}
	}
	return nil
}

// reasonInterrupted is recorded on what a worker held when the run was interrupted.
const reasonInterrupted = "bench interrupted"

// think pauses for one think time (Config.Think), as a gateway waits for its upstream call
// between Reserve and Commit, and records the pause for drive to leave out of the latency.
func (r *runner) think(ctx context.Context, worker int, rng *mrand.Rand) {
	if r.cfg.Think <= 0 {
		return
	}
	start := time.Now()
	t := time.NewTimer(time.Duration(rng.Int64N(2 * int64(r.cfg.Think))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	r.paused[worker] += time.Since(start)
}
