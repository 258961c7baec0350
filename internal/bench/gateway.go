package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
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

var gatewayActual = map[string]float64{ratelimit.MetricTokens: 420}

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

// gateway runs W6 (W7 with local) on lims and checks what the provider
// model's counters and leases hold after it against what the workers
// admitted and committed: every admission's actual tokens, nothing still
// reserved (W7: once lims are closed, their blocks returned), no lease
// left. Read before and after, as --rounds reuses the scopes.
func (r *runner) gateway(ctx context.Context, lims []*ratelimit.Limiter, local bool) (Result, error) {
	before, err := r.gatewayBooks(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := r.measureWith(ctx, lims, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
		return r.reserveCommitOn(ctx, lims, worker, rng, r.gatewayLimits(rng, local), gatewayActual)
	})
	if err != nil {
		return res, err
	}
	if local {
		r.grace.Close(lims...) // the blocks charge what they admitted as they go back
	}
	after, err := r.gatewayBooks(ctx)
	if err != nil {
		return res, err
	}
	want := int64(gatewayActual[ratelimit.MetricTokens]) * res.Admitted
	check := func(name string, want, got int64) {
		res.Checks = append(res.Checks, Check{Name: name, Want: want, Got: got, OK: want == got})
	}
	check("provider model tokens/min: tokens charged = actual tokens committed", want, int64(after.used-before.used))
	check("provider model tokens/min: tokens still reserved", 0, int64(after.reserved))
	check("provider model concurrency: leases still held", 0, after.leases)
	return res, nil
}

// gatewayBooks is what the provider model's counters hold, over all their
// windows, and its unreleased leases.
type gatewayBooks struct {
	used, reserved float64
	leases         int64
}

func (r *runner) gatewayBooks(ctx context.Context) (gatewayBooks, error) {
	var b gatewayBooks
	model := r.gatewayModel()
	q := db.New()
	counters, err := q.CounterListByScope(ctx, r.pool, db.CounterListByScopeParams{ScopeType: model.Type, ScopeKey: model.Key})
	if err != nil {
		return b, fmt.Errorf("read back the provider model's counters: %w", err)
	}
	for _, c := range counters {
		if c.Metric == ratelimit.MetricTokens {
			b.used += c.UsedValue
			b.reserved += c.ReservedValue
		}
	}
	text := func(s string) pgtype.Text { return pgtype.Text{String: s, Valid: true} }
	leases, err := q.InspectLeases(ctx, r.pool, db.InspectLeasesParams{ScopeType: text(model.Type), ScopeKey: text(model.Key), MaxRows: 1})
	if err != nil {
		return b, fmt.Errorf("read back the provider model's leases: %w", err)
	}
	for _, l := range leases {
		b.leases += l.LiveLeases + l.ExpiredLeases
	}
	return b, nil
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
