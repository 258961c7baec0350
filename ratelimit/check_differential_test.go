package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// checkSnapshot is what Check must leave as it found it: the row counts of
// every table, and every counter, allotment and live lease total of the
// scopes a test uses.
type checkSnapshot struct {
	counts     dbtest.TableRowCountsRow
	counters   []any
	allotments []any
	leases     []int64
}

func snapshotScopes(t *testing.T, pool *pgxpool.Pool, scopes []ratelimit.Scope) checkSnapshot {
	t.Helper()
	s := checkSnapshot{counts: rowCounts(t, pool)}
	for _, sc := range scopes {
		for _, r := range counterRows(t, pool, sc.Type, sc.Key) {
			s.counters = append(s.counters, r)
		}
		rows, err := testq.AllotmentListByScope(context.Background(), pool, dbtest.AllotmentListByScopeParams{ScopeType: sc.Type, ScopeKey: sc.Key})
		if err != nil {
			t.Fatalf("AllotmentListByScope: %v", err)
		}
		for _, r := range rows {
			s.allotments = append(s.allotments, r)
		}
		s.leases = append(s.leases, liveLeases(t, pool, sc.Type, sc.Key))
	}
	return s
}

// checkThenReserve runs Check, asserts it wrote nothing, then Reserve of the
// same limits, and asserts the two agree: both admit, or both refuse naming
// the same limit with the same figures. It returns Reserve's grant.
func checkThenReserve(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool, limits []ratelimit.Limit, what string) ratelimit.Grant {
	t.Helper()
	ctx := context.Background()
	var scopes []ratelimit.Scope
	for _, lim := range limits {
		scopes = append(scopes, lim.Scope)
	}
	before := snapshotScopes(t, pool, scopes)
	checkErr := l.Check(ctx, limits)
	if after := snapshotScopes(t, pool, scopes); !reflect.DeepEqual(before, after) {
		t.Fatalf("%s: Check wrote:\nbefore %+v\nafter  %+v", what, before, after)
	}
	g, reserveErr := l.Reserve(ctx, "", "", limits)
	if errors.Is(checkErr, ratelimit.ErrInvalidInput) || errors.Is(reserveErr, ratelimit.ErrInvalidInput) {
		if fmt.Sprint(checkErr) != fmt.Sprint(reserveErr) {
			t.Fatalf("%s: Check: %v; Reserve: %v", what, checkErr, reserveErr)
		}
		return g
	}
	var ce, re *ratelimit.ExceededError
	checkRefused, reserveRefused := errors.As(checkErr, &ce), errors.As(reserveErr, &re)
	if (checkErr != nil && !checkRefused) || (reserveErr != nil && !reserveRefused) {
		t.Fatalf("%s: Check: %v, Reserve: %v; want nil or *ExceededError", what, checkErr, reserveErr)
	}
	if checkRefused != reserveRefused {
		t.Fatalf("%s: Check: %v; Reserve: %v (grant %+v)", what, checkErr, reserveErr, g)
	}
	if !checkRefused {
		return g
	}
	type figures struct {
		ScopeType, ScopeKey, Metric                       string
		Limit, Amount, Current, Used, Reserved, Projected float64
		WindowSeconds                                     int
		ResetAt                                           time.Time
		Retryable                                         bool
		Policy                                            string
	}
	fig := func(e *ratelimit.ExceededError) figures {
		return figures{e.ScopeType, e.ScopeKey, e.Metric, e.Limit, e.Amount, e.Current, e.Used, e.Reserved, e.Projected,
			e.WindowSeconds, e.ResetAt, e.Retryable, e.Policy}
	}
	if fig(ce) != fig(re) {
		t.Fatalf("%s: Check refused with %+v\nReserve refused with %+v", what, fig(ce), fig(re))
	}
	// RetryAfter is measured on the database's clock at each call: Reserve
	// runs a little later.
	if d := ce.RetryAfter - re.RetryAfter; d < 0 || d > 2*time.Second || (ce.RetryAfter == 0) != (re.RetryAfter == 0) {
		t.Fatalf("%s: RetryAfter: Check %s, Reserve %s", what, ce.RetryAfter, re.RetryAfter)
	}
	return g
}

// TestCheckAgreesWithReserveOnWindowLimits fills window counters to random
// states (used and reserved, near, at and past their limits, fractional
// amounts, amounts at MinAmount and MaxAmount scale, several limits of which
// some are full) and asserts that Check's verdict is what Reserve then does,
// and that Check writes nothing.
func TestCheckAgreesWithReserveOnWindowLimits(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := pgtest.WindowWithRoom(t, pool, time.Hour, 2*time.Minute) // an hour or a few minutes more
	l := ratelimit.New(pool)
	ctx := context.Background()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))

	keys := []string{uniqueKey("a"), uniqueKey("b"), uniqueKey("c")}
	scales := []float64{4 * ratelimit.MinAmount, 0.1, 1, 1000, ratelimit.MaxAmount / 16}
	mk := func(key string, scale, limit, amount float64, metric string) ratelimit.Limit {
		w := window("api_key", key, metric, limit*scale, amount*scale)
		w.Window = hour
		w.Policy = "p-" + metric
		return w
	}
	limitsOf := map[string]float64{}
	scaleOf := map[string]float64{}
	for _, k := range keys {
		limitsOf[k] = float64(1 + rng.IntN(10))
		scaleOf[k] = scales[rng.IntN(len(scales))]
	}
	for i := range 60 {
		n := 1 + rng.IntN(3)
		perm := rng.Perm(len(keys))[:n]
		var limits []ratelimit.Limit
		for _, p := range perm {
			k := keys[p]
			amounts := []float64{1, 0.5, 0.25, 3, limitsOf[k], limitsOf[k] + 1}
			limit := limitsOf[k]
			if rng.IntN(10) == 0 {
				limit = 0
			}
			limits = append(limits, mk(k, scaleOf[k], limit, amounts[rng.IntN(len(amounts))], ratelimit.MetricTokens))
		}
		g := checkThenReserve(t, l, pool, limits, fmt.Sprintf("step %d %+v", i, limits))
		if g.Empty() {
			continue
		}
		switch rng.IntN(3) {
		case 0: // keep it reserved
		case 1:
			half := g.Reservations[0].Amount / 2
			if half < ratelimit.MinAmount {
				half = g.Reservations[0].Amount
			}
			actual := map[string]float64{ratelimit.MetricTokens: half}
			if _, err := l.Commit(ctx, g, actual); err != nil {
				t.Fatalf("Commit: %v", err)
			}
		case 2:
			if _, err := l.Release(ctx, g, "test"); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
}

// TestCheckAgreesWithReserveOnConcurrentLimits: Check does not decide
// concurrent limits (documented), so it admits a full concurrency scope;
// with a window limit beside it, the window's verdict is Reserve's whenever
// the concurrency scope has room.
func TestCheckAgreesWithReserveOnConcurrentLimits(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("c")
	c := concurrent("model", key, 2)
	c.Amount = 1.5
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{c})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if err := l.Check(ctx, []ratelimit.Limit{c}); err != nil {
		t.Fatalf("Check of a concurrent limit: %v, want nil (not checked)", err)
	}
	w := window("api_key", key, "requests", 1, 1)
	// An hour's window (or a few minutes more) with a minute left: the
	// second checkThenReserve meets the window the first filled.
	w.Window = hourWindow(t, pool)
	c.Amount = 0.5 // fits beside the live 1.5
	g2 := checkThenReserve(t, l, pool, []ratelimit.Limit{c, w}, "room in both")
	for _, g := range []ratelimit.Grant{g, g2} {
		if _, err := l.ReleaseLeases(ctx, g.Leases, "test"); err != nil {
			t.Fatalf("ReleaseLeases: %v", err)
		}
	}
	c.Amount = 2
	checkThenReserve(t, l, pool, []ratelimit.Limit{c, w}, "window full, released lease's slots free")
}
