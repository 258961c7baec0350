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
	model := r.gatewayModel()
	return []ratelimit.Limit{
		{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: unlimitedRequests, Amount: 1, Window: time.Minute},
		{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute},
		{Scope: model, Metric: ratelimit.MetricTokens, Limit: unlimitedTokens, Amount: 500, Window: time.Minute, Local: local},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 1_000, Amount: 1},
	}
}

// gatewayModel is the provider model every gateway request draws on.
func (r *runner) gatewayModel() ratelimit.Scope {
	return ratelimit.Scope{Type: "provider_model", Key: r.key("gpt")}
}

// gatewayActual is what a gateway request (W2, W6, W7) commits.
var gatewayActual = map[string]float64{ratelimit.MetricTokens: 420}

// gatewayKeyBooks are the books of the API keys of W2, W6 and W7, those whose
// keys begin with keyPrefix: each admission charges a request and its actual
// tokens.
func gatewayKeyBooks(keyPrefix string) booked {
	return booked{label: "api keys", window: time.Minute, scopes: scopeSet{"api_key", keyPrefix},
		charged: map[string]float64{ratelimit.MetricRequests: 1, ratelimit.MetricTokens: gatewayActual[ratelimit.MetricTokens]}}
}

func (r *runner) w6(ctx context.Context) (Result, error) {
	return r.gateway(ctx, r.lims, false)
}

// W7 and W8 run on Limiters of their own (one per instance): each holds the
// blocks of its Local limits, which the workload's end returns, closing them
// within the run's grace.

func (r *runner) w7(ctx context.Context) (Result, error) {
	lims := r.limiters()
	defer r.grace.Close(lims...)
	return r.gateway(ctx, lims, true)
}

// gateway runs W6 (W7 with local) on lims and checks the books of its API
// keys and of the provider model: each admission charged 1 request and
// its 420 actual tokens to its key, its tokens to the model (W7: once lims
// are closed, their blocks returned, each charging what it admitted),
// with nothing still reserved and no lease left.
func (r *runner) gateway(ctx context.Context, lims []*ratelimit.Limiter, local bool) (Result, error) {
	books := []booked{
		gatewayKeyBooks(r.key("g")),
		{label: "provider model", window: time.Minute, scopes: scopeSet{r.gatewayModel().Type, r.gatewayModel().Key}, charged: gatewayActual, leases: true},
	}
	op := func(ctx context.Context, worker int, rng *mrand.Rand) error {
		return r.reserveCommitOn(ctx, lims, worker, rng, r.gatewayLimits(rng, local), gatewayActual)
	}
	return r.checkingBooks(ctx, books, func() (Result, error) {
		if local {
			return r.measureLocal(ctx, lims, r.cfg.Duration, op)
		}
		return r.measureWith(ctx, lims, r.cfg.Duration, op)
	})
}

// w8 checks its key's books once lims are closed, their blocks returned,
// each charging what it admitted. Its key shares no prefix with W3's.
func (r *runner) w8(ctx context.Context) (Result, error) {
	lims := r.limiters()
	defer r.grace.Close(lims...)
	limit := requestsLimit(r.key("local-hot"))
	limit.Local = true
	limits := []ratelimit.Limit{limit}
	return r.checkingBooks(ctx, limitBooks("api key", limit), func() (Result, error) {
		return r.measureLocal(ctx, lims, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.reserveCommitOn(ctx, lims, worker, rng, limits, nil)
		})
	})
}

// measureLocal is measureWith, for d, on lims, Limiters with Local
// limits, which it closes once the workload ended well: each block charges
// what it admitted as it goes back, before the books are read.
func (r *runner) measureLocal(ctx context.Context, lims []*ratelimit.Limiter, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (Result, error) {
	res, err := r.measureWith(ctx, lims, d, op)
	if err == nil {
		r.grace.Close(lims...)
	}
	return res, err
}
