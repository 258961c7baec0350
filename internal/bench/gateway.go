package bench

import (
	"context"
	mrand "math/rand/v2"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The gateway workloads (W6, W7) have the shape of a real AI gateway's
// admission: every request carries its API key's requests/min and
// tokens/min, and the provider model's tokens/min and concurrency, which
// every request of the gateway shares (the hot scope); W8 is the hot key
// alone, admitted from a local allotment.

// gatewayLimits are one request's limits; local admits the provider
// model's tokens/min from local allotments.
func (r *runner) gatewayLimits(rng *mrand.Rand, local bool) []ratelimit.Limit {
	apiKey := ratelimit.Scope{Type: "api_key", Key: r.keyN("g", rng.IntN(1_000))}
	model := ratelimit.Scope{Type: "provider_model", Key: r.key("gpt")}
	return []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute},
		{Scope: model, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute, Local: local},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 1_000, Amount: 1},
	}
}

var gatewayActual = map[string]float64{ratelimit.MetricTokens: 420}

func (r *runner) w6(ctx context.Context) (Result, error) {
	return r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
		return r.reserveCommit(ctx, worker, rng, r.gatewayLimits(rng, false), gatewayActual)
	})
}

// W7 and W8 run on Limiters of their own (one per instance): each holds the
// blocks of its Local limits, which the workload's end returns, closing them
// within the run's grace.

func (r *runner) w7(ctx context.Context) (Result, error) {
	lims := r.limiters()
	defer r.grace.Close(lims...)
	return r.measureWith(ctx, lims, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
		return r.reserveCommitOn(ctx, lims, worker, rng, r.gatewayLimits(rng, true), gatewayActual)
	})
}

func (r *runner) w8(ctx context.Context) (Result, error) {
	lims := r.limiters()
	defer r.grace.Close(lims...)
	limit := requestsLimit(r.key("hot-local"))
	limit.Local = true
	limits := []ratelimit.Limit{limit}
	return r.measureWith(ctx, lims, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
		return r.reserveCommitOn(ctx, lims, worker, rng, limits, nil)
	})
}
