package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The gateway workloads, with and without allotments, check the provider
// model every request draws on once they end: its counters charged exactly
// the actual tokens the workers committed (420 per admission, not the
// estimate of 500), nothing left reserved (W7: its blocks returned) and no
// lease left held. A unit charged behind the callers' backs during the run
// (what a block returned at its estimates, or a commit charged twice, would
// do) fails the run.
func TestGatewayWorkloadsCheckTheProviderModelsBooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, code := range []string{"W6", "W7"} {
		for _, corrupt := range []bool{false, true} {
			pool := pgtest.NewPool(t)
			pgtest.AwaitRoomInWindow(t, pool, time.Minute, 2*time.Second)
			cfg := Config{Workers: 4, Duration: time.Second, Only: []string{code}, RunID: "gw" + code}
			var once sync.Once
			var corrupted int64
			if corrupt {
				cfg.ProgressEvery = 200 * time.Millisecond
				cfg.Progress = func(Progress) {
					once.Do(func() {
						var err error
						corrupted, err = dbtest.New().OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
							UsedDelta: 1, ScopeType: "provider_model", ScopeKey: "bench-" + cfg.RunID + "-gpt", Metric: ratelimit.MetricTokens})
						if err != nil {
							corrupted = -1
						}
					})
				}
			}
			out, err := Run(ctx, pool, cfg, nil)
			if err != nil || len(out) != 1 {
				t.Fatalf("Run %s: %+v, %v", code, out, err)
			}
			res := out[0]
			if res.Admitted == 0 || res.Errors != 0 {
				t.Fatalf("%s: %d admitted, %d errors (%s)", code, res.Admitted, res.Errors, res.FirstError)
			}
			var tokens *Check
			for i, c := range res.Checks {
				if strings.Contains(c.Name, "actual tokens committed") {
					tokens = &res.Checks[i]
				}
			}
			if tokens == nil || len(res.Checks) < 3 {
				t.Fatalf("%s: checks %+v, want the provider model's tokens, reservations and leases", code, res.Checks)
			}
			if !corrupt && (!res.OK || tokens.Want != 420*res.Admitted) {
				t.Errorf("%s: ok %t, checks %+v; want every check passed, %d tokens for %d admissions", code, res.OK, res.Checks, 420*res.Admitted, res.Admitted)
			}
			if corrupt && (corrupted < 1 || res.OK || tokens.OK || tokens.Got != tokens.Want+1) {
				t.Errorf("%s with a token charged behind the callers' backs (%d counters): ok %t, checks %+v; want the tokens check failed by 1",
					code, corrupted, res.OK, res.Checks)
			}
		}
	}
}
