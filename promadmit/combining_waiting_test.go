package promadmit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_combined_waiting is, by kind, the calls waiting in the Limiter's
// combiners now (ratelimit.CombinerStats.Waiting): with a transaction
// holding the counter's row, each Reserve and each Commit that comes adds
// one, whether its statement is in flight, stuck behind the lock, or it
// waits for the next; once the lock is gone and every call returned, both
// are back at 0.
func TestCombiningCollectorReportsCallsWaiting(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	reg := prometheus.NewRegistry()
	registerCombining(t, reg, limiter)
	ctx := context.Background()
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("waiting-%d", time.Now().UnixNano())},
		Metric: ratelimit.MetricRequests, Limit: 100, Amount: 1, Window: pgtest.WindowWithRoom(t, pool, time.Hour, time.Minute)}}
	const reserves, commits = 3, 2
	grants := make([]ratelimit.Grant, commits)
	for i := range grants {
		g, err := limiter.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}
	wantWaiting(t, reg, 0, 0, "before")
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := limiter.WithTx(holder).Reserve(ctx, "", "", limits); err != nil { // holds the counter's row
		t.Fatal(err)
	}

	errs := make(chan error, reserves+commits)
	for n := 1; n <= reserves; n++ {
		go func() { _, err := limiter.Reserve(ctx, "", "", limits); errs <- err }()
		if n == 1 {
			pgtest.AwaitLockWaiters(t, pool, "the first Reserve")
		}
		awaitWaiting(t, reg, promadmit.KindReserve, n)
	}
	for n := 1; n <= commits; n++ {
		go func() { _, err := limiter.Commit(ctx, grants[n-1], nil); errs <- err }()
		awaitWaiting(t, reg, promadmit.KindSettle, n)
	}
	wantWaiting(t, reg, reserves, commits, "behind the lock")

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range reserves + commits {
		if err := <-errs; err != nil {
			t.Errorf("a call behind the lock: %v", err)
		}
	}
	wantWaiting(t, reg, 0, 0, "once every call returned")
}

// waitingGauge is pgadmit_combined_waiting of kind in a scrape of reg.
func waitingGauge(t *testing.T, reg prometheus.Gatherer, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "pgadmit_combined_waiting" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind && m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no gauge pgadmit_combined_waiting{kind=%q}", kind)
	return 0
}

// awaitWaiting waits until the gauge of kind reaches n, and fails t if it
// passes n (a call counted twice) or does not reach it in 5 s.
func awaitWaiting(t *testing.T, reg prometheus.Gatherer, kind string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		v := waitingGauge(t, reg, kind)
		if v > float64(n) {
			t.Fatalf("pgadmit_combined_waiting{kind=%q} %g once call %d came, want %d", kind, v, n, n)
		}
		if v == float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgadmit_combined_waiting{kind=%q} %g, never %d", kind, v, n)
		}
	}
}

// wantWaiting fails t unless the gauges are at reserve and settle.
func wantWaiting(t *testing.T, reg prometheus.Gatherer, reserve, settle int, when string) {
	t.Helper()
	if r, s := waitingGauge(t, reg, promadmit.KindReserve), waitingGauge(t, reg, promadmit.KindSettle); r != float64(reserve) || s != float64(settle) {
		t.Errorf("%s: pgadmit_combined_waiting reserve %g, settle %g; want %d and %d", when, r, s, reserve, settle)
	}
}
