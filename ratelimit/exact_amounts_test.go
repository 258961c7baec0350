package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// decimalOf is x as the database holds it: pgx sends a float64 as its
// shortest decimal form (0.1 is 0.1 there, 499999999999999.9375 is
// 499999999999999.94).
func decimalOf(x float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	if !ok {
		panic(x)
	}
	return r
}

// assertChargedExactly checks that the scope has one counter, which
// charges exactly committed (compared in decimal, as numeric holds it), at
// most its limit, with nothing reserved.
func assertChargedExactly(t *testing.T, conn db.DBTX, key string, committed *big.Rat) {
	t.Helper()
	rows, err := testq.CounterDecimalsByScope(context.Background(), conn, dbtest.CounterDecimalsByScopeParams{ScopeType: "model", ScopeKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("counters %+v; want one", rows)
	}
	c := rows[0]
	used, _ := new(big.Rat).SetString(c.UsedValue)
	limit, _ := new(big.Rat).SetString(c.LimitValue)
	reserved, _ := new(big.Rat).SetString(c.ReservedValue)
	if used.Cmp(committed) != 0 || used.Cmp(limit) > 0 || reserved.Sign() != 0 {
		t.Errorf("counter used %s, reserved %s, limit %s; want used %s (what was committed, at most the limit), nothing reserved",
			c.UsedValue, c.ReservedValue, c.LimitValue, committed.FloatString(20))
	}
}

// A window limit decides in exact decimal, as numeric does, whether it is
// decided in the database or admitted from a Local block: a block's float64
// sum that rounds below the decimal one (0.3 + 0.7000000000000001 is 1 in
// float64), or a granted block whose units a float64 rounds up
// (499999999999999.999999 is 5e14), admitted past the limit, and tenths
// summed in float64 charged the counter 0.30000000000000004. Each case runs
// with every step decided in the database, and with the Local steps
// admitted from blocks (MaxShare 1, so that a block may be granted the
// half of its window's room that the cases count on); Remaining is never
// negative.
func TestLocalBlocksDecideAsTheDatabaseInExactDecimal(t *testing.T) {
	t.Parallel()
	type step struct {
		local  bool
		amount float64
		admit  bool
	}
	tenths := make([]step, 11)
	for i := range tenths {
		tenths[i] = step{true, 0.1, i < 10}
	}
	cases := []struct {
		name  string
		limit float64
		steps []step
	}{
		{"block sum rounds below the decimal sum", 2, []step{
			{true, 0.3, true},                     // a block of 1: half the window
			{false, 1, true},                      // the rest of the window
			{true, 0.7 + float64(nonzero), false}, // 0.7000000000000001: 0.3 + it is 1 in float64
			{true, 0.7, true},
		}},
		{"granted rounds up in float64", 1e15, []step{
			{false, 0.000002, true},
			{true, 4e13, true},                // a block of 499999999999999.999999
			{false, 499999999999999.94, true}, // and the window is full
			{false, 0.059999, true},
			{true, 4e13, true}, {true, 4e13, true}, {true, 4e13, true}, {true, 4e13, true},
			{true, 4e13, true}, {true, 4e13, true}, {true, 4e13, true}, {true, 4e13, true},
			{true, 4e13, true}, {true, 4e13, true}, {true, 4e13, true},
			{true, 2e13, false}, // 5e14 in all: 0.000001 more than the block
		}},
		{"tenths", 1, tenths},
	}
	for _, c := range cases {
		for _, mode := range []string{"database", "local"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				pool := pgtest.NewPool(t)
				hour := hourWindow(t, pool)
				ctx := context.Background()
				l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{MaxShare: 1, IdleAfter: time.Minute}))
				key := uniqueKey("exact")
				used := new(big.Rat)
				for i, s := range c.steps {
					lim := localWindow(hour, key, c.limit, s.amount)
					lim.Local = s.local && mode == "local"
					g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
					if err != nil && !errors.Is(err, ratelimit.ErrExceeded) {
						t.Fatal(err)
					}
					if (err == nil) != s.admit {
						t.Fatalf("step %d (%v, Local %v): admitted %v, want %v (%v)", i, s.amount, lim.Local, err == nil, s.admit, err)
					}
					if err != nil {
						continue
					}
					if r := g.Reservations[0]; r.Remaining < 0 || r.Local != lim.Local {
						t.Errorf("step %d: %+v; want Local %v and Remaining not negative", i, r, lim.Local)
					}
					if _, err := l.Commit(ctx, g, nil); err != nil {
						t.Fatal(err)
					}
					used.Add(used, decimalOf(s.amount))
				}
				l.Close()
				assertChargedExactly(t, pool, key, used)
				assertBooksBalance(t, pool, "model", key)
			})
		}
	}
}

// nonzero keeps 0.7 + 1e-16 a float64 sum (0.7000000000000001), not a
// constant expression that Go would round to 0.7.
var nonzero = 1e-16

// Seeded random fractional costs (tokens times a price per token) admitted
// from Local blocks by two Limiters on one counter, and committed at
// their estimate, less, or released: the counter charges exactly what was
// committed, in decimal, never more than its limit, and balances its books.
func TestLocalFractionalCostsChargeWhatWasCommitted(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			const limit = 5.0
			pools := pgtest.NewPools(t, 2)
			hour := hourWindow(t, pools[0])
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 11))
			var limiters []*ratelimit.Limiter
			for _, p := range pools {
				limiters = append(limiters, ratelimit.New(p, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute})))
			}
			key := uniqueKey("cost")
			prices := []float64{0.000002, 0.0000037, 0.00001, 0.000015}
			committed := new(big.Rat)
			admitted := 0
			for range 600 {
				l := limiters[rng.IntN(len(limiters))]
				cost := float64(1+rng.IntN(4000)) * prices[rng.IntN(len(prices))]
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, limit, cost)})
				if errors.Is(err, ratelimit.ErrExceeded) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				admitted++
				switch rng.IntN(4) {
				case 0:
					_, err = l.Release(ctx, g, "unused")
				case 1:
					actual := cost * 0.7
					committed.Add(committed, decimalOf(actual))
					_, err = l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: actual})
				default:
					committed.Add(committed, decimalOf(cost))
					_, err = l.Commit(ctx, g, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, l := range limiters {
				l.Close()
			}
			assertChargedExactly(t, pools[0], key, committed)
			if admitted < 100 || committed.Cmp(decimalOf(limit/2)) < 0 {
				t.Errorf("admitted %d, committed %s: the limit was never approached", admitted, committed.FloatString(10))
			}
			assertBooksBalance(t, pools[0], "model", key)
		})
	}
}
