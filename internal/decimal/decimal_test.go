package decimal

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// exact is x's shortest decimal form as a big.Rat.
func exact(x float64) *big.Rat {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	return r
}

// Units adds, subtracts, compares, rounds down, divides and writes amounts
// as big.Rat does with their shortest decimal forms, on either side of its
// whole-number fast path: whole numbers up to 2^53, fractions, and sums
// that cross 2^53.
func TestUnitsAgreeWithExactDecimals(t *testing.T) {
	t.Parallel()
	samples := []float64{0, 1, 2, 0.1, 0.3, 0.7000000000000001, 0.0037, 1e-9, 1e15, 499999999999999.9, maxWhole, maxWhole - 1, 3, -2.5}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, b := samples[rng.IntN(len(samples))], samples[rng.IntN(len(samples))]
		u, v := Of(a), Of(b)
		if rng.IntN(2) == 0 { // a value the fast path reached by a sum
			u = u.Plus(Of(1)).Minus(Of(1))
		}
		for _, c := range []struct {
			name string
			got  Units
			want *big.Rat
		}{
			{"plus", u.Plus(v), new(big.Rat).Add(exact(a), exact(b))},
			{"minus", u.Minus(v), new(big.Rat).Sub(exact(a), exact(b))},
		} {
			if c.got.rat().Cmp(c.want) != 0 {
				t.Fatalf("%v %s %v = %s, want %s", a, c.name, b, c.got.rat().RatString(), c.want.RatString())
			}
			back, ok := Parse(c.got.Text())
			if !ok || back.Cmp(c.got) != 0 {
				t.Fatalf("%v %s %v written %q reads back as %v", a, c.name, b, c.got.Text(), back.rat())
			}
			floor := new(big.Int).Div(c.want.Num(), c.want.Denom())
			if f, _ := new(big.Float).SetInt(floor).Float64(); c.got.Floor() != f {
				t.Fatalf("floor(%v %s %v) = %v, want %v", a, c.name, b, c.got.Floor(), f)
			}
		}
		if got, want := u.Cmp(v), exact(a).Cmp(exact(b)); got != want {
			t.Fatalf("Cmp(%v, %v) = %d, want %d", a, b, got, want)
		}
		if b != 0 {
			want, _ := new(big.Rat).Quo(exact(a), exact(b)).Float64()
			if got := u.Ratio(v); got != want {
				t.Fatalf("Ratio(%v, %v) = %v, want %v", a, b, got, want)
			}
		}
	}
	// Ten tenths are 1, and 0.3 plus 0.7000000000000001 is more than 1.
	sum := Units{}
	for range 10 {
		sum = sum.Plus(Of(0.1))
	}
	if sum.Cmp(Of(1)) != 0 || sum.r != nil {
		t.Errorf("ten tenths = %s, want 1 on the fast path", sum.rat().RatString())
	}
	tenth := 0.1 // a float64: 0.1*7 on constants would be exactly 0.7
	if Of(0.3).Plus(Of(tenth*7)).Cmp(Of(1)) <= 0 {
		t.Errorf("0.3 + 0.7000000000000001 <= 1")
	}
}

// Floor rounds the exact value down, where Approx rounds to the nearest
// float64 first: 1e8 less 1e-9 is 99999999.999999999, which a float64
// holds as 1e8. Ratio divides exactly: 0.99 of 1.1 is 0.9, which float64's
// 0.99 / 1.1 (0.8999999999999999) falls short of.
func TestFloorAndRatioAreExact(t *testing.T) {
	t.Parallel()
	u := Of(1e8).Minus(Of(1e-9))
	if got := u.Floor(); got != 99_999_999 {
		t.Errorf("floor(1e8 - 1e-9) = %v, want 99999999 (Approx is %v)", got, u.Approx())
	}
	if got := Of(2.3).Minus(Of(0.3)).Floor(); got != 2 {
		t.Errorf("floor(2.3 - 0.3) = %v, want 2", got)
	}
	if got := Of(-0.5).Floor(); got != -1 {
		t.Errorf("floor(-0.5) = %v, want -1", got)
	}
	if got := Of(0.99).Ratio(Of(1.1)); got != 0.9 {
		t.Errorf("0.99 / 1.1 = %v, want 0.9", got)
	}
	if got := Of(0.5).Ratio(Of(0)); !math.IsInf(got, 1) {
		t.Errorf("0.5 / 0 = %v, want +Inf as float64's", got)
	}
	if got := Of(0).Ratio(Of(0)); !math.IsNaN(got) {
		t.Errorf("0 / 0 = %v, want NaN as float64's", got)
	}
}

// What no amount is (NaN, an infinity) is 0, not a panic.
func TestOfWhatNoAmountIs(t *testing.T) {
	t.Parallel()
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if u := Of(x); u.Sign() != 0 || u.Text() != "0" {
			t.Errorf("Of(%v) = %s, want 0", x, u.Text())
		}
	}
}
