package promadmit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_combined_statement_seconds_total counts a statement's wait for a
// pool connection too (a statement takes its connection once sent), and
// its help says so: read as the database's time alone, a pool too small
// would pass for a slow database.
func TestStatementSecondsCountTheConnectionWait(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url+"&pool_max_conns=1")
	limiter := ratelimit.New(pool)
	reg := prometheus.NewRegistry()
	registerCombining(t, reg, limiter)

	ctx := context.Background()
	held, err := pool.Acquire(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	const wait = 300 * time.Millisecond
	time.AfterFunc(wait, held.Release)
	limit := ratelimit.Limit{Scope: ratelimit.Scope{Type: "t", Key: "k"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: ratelimit.MaxWindow}
	if _, err := limiter.Reserve(ctx, "", "", []ratelimit.Limit{limit}); err != nil {
		t.Fatal(err)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var f *dto.MetricFamily
	for _, g := range families {
		if g.GetName() == "pgadmit_combined_statement_seconds_total" {
			f = g
		}
	}
	if f == nil {
		t.Fatal("no pgadmit_combined_statement_seconds_total")
	}
	for _, m := range f.GetMetric() {
		if m.GetLabel()[0].GetValue() == promadmit.KindReserve && m.GetCounter().GetValue() < (wait-50*time.Millisecond).Seconds() {
			t.Errorf("reserve statement seconds %g, want the %v it waited for a connection", m.GetCounter().GetValue(), wait)
		}
	}
	if !strings.Contains(f.GetHelp(), "wait for a pool connection") {
		t.Errorf("help %q does not say that the wait for a pool connection counts", f.GetHelp())
	}
}
