package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// When several limits do not fit, Reserve's *ExceededError is the first
// of them in the caller's order, whatever their kinds (the database decides
// windows and leases in its own lock order) and whichever comes first;
// Check's likewise, of window limits. A gateway's 429 names that limit.
func TestRefusalNamesTheFirstLimitInTheCallersOrder(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	hour := hourWindow(t, pool)
	// full returns a limit of its kind that one admission has filled.
	full := func(kind string) ratelimit.Limit {
		t.Helper()
		limit := concurrent("model", uniqueKey("order-"+kind), 1)
		if kind == "window" {
			limit = window("api_key", uniqueKey("order-"+kind), "requests", 1, 1)
			limit.Window = hour
		}
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{limit}); err != nil {
			t.Fatal(err)
		}
		return limit
	}
	refusedBy := func(err error) string {
		var exceeded *ratelimit.ExceededError
		if !errors.As(err, &exceeded) {
			return fmt.Sprintf("no refusal (%v)", err)
		}
		return exceeded.ScopeKey
	}
	for _, kinds := range [][2]string{
		{"window", "window"}, {"window", "concurrent"}, {"concurrent", "window"}, {"concurrent", "concurrent"},
	} {
		limits := []ratelimit.Limit{full(kinds[0]), full(kinds[1])}
		for _, order := range [][]ratelimit.Limit{limits, {limits[1], limits[0]}} {
			_, err := l.Reserve(ctx, "", "", order)
			if got, want := refusedBy(err), order[0].Scope.Key; got != want {
				t.Errorf("Reserve(%s %s, %s %s) refused by %s, want the first, %s",
					order[0].Metric, order[0].Scope.Key, order[1].Metric, order[1].Scope.Key, got, want)
			}
			if kinds != [2]string{"window", "window"} {
				continue // Check decides no concurrent limit
			}
			if got, want := refusedBy(l.Check(ctx, order)), order[0].Scope.Key; got != want {
				t.Errorf("Check(%s, %s) refused by %s, want the first, %s", order[0].Scope.Key, order[1].Scope.Key, got, want)
			}
		}
	}
}
