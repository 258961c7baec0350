package ratelimit

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// units adds, subtracts, compares and writes amounts as big.Rat does with
// their shortest decimal forms, on either side of its whole-number fast
// path: whole numbers up to 2^53, fractions, and sums that cross 2^53.
func TestUnitsAgreeWithExactDecimals(t *testing.T) {
	t.Parallel()
	exact := func(x float64) *big.Rat {
		r, _ := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
		return r
	}
	samples := []float64{0, 1, 2, 0.1, 0.3, 0.7000000000000001, 0.0037, 1e-9, 1e15, 499999999999999.9, maxWhole, maxWhole - 1, 3}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, b := samples[rng.IntN(len(samples))], samples[rng.IntN(len(samples))]
		u, v := unitsOf(a), unitsOf(b)
		if rng.IntN(2) == 0 { // a value the fast path reached by a sum
			u = u.plus(unitsOf(1)).minus(unitsOf(1))
		}
		for _, c := range []struct {
			name string
			got  units
			want *big.Rat
		}{
			{"plus", u.plus(v), new(big.Rat).Add(exact(a), exact(b))},
			{"minus", u.minus(v), new(big.Rat).Sub(exact(a), exact(b))},
		} {
			if c.got.rat().Cmp(c.want) != 0 {
				t.Fatalf("%v %s %v = %s, want %s", a, c.name, b, c.got.rat().RatString(), c.want.RatString())
			}
			back, ok := parseUnits(c.got.text())
			if !ok || back.cmp(c.got) != 0 {
				t.Fatalf("%v %s %v written %q reads back as %v", a, c.name, b, c.got.text(), back.rat())
			}
		}
		if got, want := u.cmp(v), exact(a).Cmp(exact(b)); got != want {
			t.Fatalf("cmp(%v, %v) = %d, want %d", a, b, got, want)
		}
	}
	// Ten tenths are 1, and 0.3 plus 0.7000000000000001 is more than 1.
	sum := units{}
	for range 10 {
		sum = sum.plus(unitsOf(0.1))
	}
	if sum.cmp(unitsOf(1)) != 0 || sum.r != nil {
		t.Errorf("ten tenths = %s, want 1 on the fast path", sum.rat().RatString())
	}
	tenth := 0.1 // a float64: 0.1*7 on constants would be exactly 0.7
	if unitsOf(0.3).plus(unitsOf(tenth*7)).cmp(unitsOf(1)) <= 0 {
		t.Errorf("0.3 + 0.7000000000000001 <= 1")
	}
	if got := remaining(1, 0.9, 0, 0.1); got != 0 {
		t.Errorf("remaining(1, 0.9, 0, 0.1) = %v, want 0", got)
	}
}
