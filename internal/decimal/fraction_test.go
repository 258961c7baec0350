package decimal

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// ofBefore is Of as it was before fraction: big.Rat parsing x's text.
func ofBefore(x float64) Units {
	if x == math.Trunc(x) && math.Abs(x) <= maxWhole {
		return Units{f: x}
	}
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	if !ok {
		return Units{}
	}
	return Units{r: r}
}

// checkOf fails t unless Of(x) is ofBefore(x): the same side (f or r),
// the same float64 to the bit, or the same numerator and denominator.
func checkOf(t *testing.T, x float64) {
	t.Helper()
	got, want := Of(x), ofBefore(x)
	same := (got.r == nil) == (want.r == nil)
	if same && got.r == nil {
		same = math.Float64bits(got.f) == math.Float64bits(want.f)
	} else if same {
		same = got.r.Num().Cmp(want.r.Num()) == 0 && got.r.Denom().Cmp(want.r.Denom()) == 0
	}
	if !same {
		t.Fatalf("Of(%v) = %s (in r: %t), want %s (in r: %t)",
			x, got.rat().RatString(), got.r != nil, want.rat().RatString(), want.r != nil)
	}
}

// Of is what it was for every float64: fractions of few and of many
// decimals, tiny and huge magnitudes, negatives, whole numbers on either
// side of 2^53, NaN and the infinities.
func TestOfAgreesWithBefore(t *testing.T) {
	t.Parallel()
	for _, x := range ofSeeds {
		checkOf(t, x)
		checkOf(t, -x)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50_000 {
		checkOf(t, math.Float64frombits(rng.Uint64())) // any float64, NaNs and subnormals too
		// A decimal of up to 17 digits with its point anywhere, as a limit is written.
		digits := rng.Int64N(int64(pow10[1+rng.IntN(17)]))
		x, err := strconv.ParseFloat(strconv.FormatInt(digits, 10)+"e"+strconv.Itoa(rng.IntN(50)-30), 64)
		if err != nil {
			t.Fatal(err)
		}
		checkOf(t, x)
		checkOf(t, -x)
		checkOf(t, math.Nextafter(x, math.Inf(1))) // 17 digits, mostly
		checkOf(t, maxWhole+float64(rng.IntN(5)-2)+rng.Float64())
	}
}

func FuzzOfAgreesWithBefore(f *testing.F) {
	for _, x := range ofSeeds {
		f.Add(x)
	}
	f.Fuzz(checkOf)
}

// ofSeeds are the edges: scale 1 and maxScale and one past it, 17
// digits, subnormals, NaN and the infinities, 2^53 about.
var ofSeeds = []float64{
	0, 0.1, 0.5, 2.75, 0.0037, 1e-9, 0.7000000000000001, 499999999999999.9,
	1e-19, 1.5e-19, 1e-20, 1.2345678901234567e-3, 1.2345678901234567e-2, 9.999999999999999e-4,
	0.30000000000000004, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1e20, 1e23,
	maxWhole, maxWhole + 1, maxWhole - 0.5, 1 << 52, 1<<52 + 0.5, 4503599627370495.5,
	math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, math.MaxFloat64,
}

// A fraction of few decimals, the amounts of fractional limits, takes 3
// allocations (the big.Rat and its two words), not the 9 to 11 of parsing
// its text. Race instrumentation does not change the count; a 32-bit word
// holds less than a uint64, so there a few more words are made.
func TestOfAllocations(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("counted for 64-bit words")
	}
	for _, x := range []float64{0.1, -2.75, 0.0037, 1e-9, 499999999999999.9, 1.2345678901234567e-3} {
		if n := testing.AllocsPerRun(100, func() { Of(x) }); n > 3 {
			t.Errorf("Of(%v) allocates %v times, want 3 at most", x, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Of(42) }); n != 0 {
		t.Errorf("Of(42) allocates %v times, want none", n)
	}
}

func BenchmarkOf(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Of(float64(i%1000) / 8) // 0.125 steps
	}
}
