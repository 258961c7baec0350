// Package decimal adds, subtracts, compares and rounds amounts (limits,
// estimates, what a counter holds) exactly, as the database's numeric
// does: ratelimit counts a Local block's units so, and tells what a
// refusing limit had left; httpadmit works out what its headers show.
// One implementation for both, so that they agree to the last digit.
package decimal

import (
	"math"
	"math/big"
	"strconv"
)

// Units is an amount as the database holds it, exactly: pgx sends a
// float64 to a numeric parameter as its shortest decimal form, so 0.1 is
// 0.1 there, not the binary fraction a float64 holds, and numeric adds
// such decimals exactly. In float64, 0.3 plus 0.7000000000000001 is 1, and
// ten tenths are 0.9999999999999999. Whole numbers below 2^53, which
// float64 adds and compares exactly, stay in f, so that whole amounts (of
// tokens or requests) pay nothing for exactness; any other value is a
// big.Rat in r. The zero value is 0.
type Units struct {
	f float64  // the value when r is nil: a whole number, |f| <= maxWhole
	r *big.Rat // the value otherwise; never changed once set (values share it)
}

// maxWhole bounds the whole numbers kept in f: float64 holds every whole
// number up to 2^53, and a sum of two below 2^53 that float64 rounds to
// at most maxWhole was exact (one of 2^53 or more rounds to 2^53 or more,
// as 2^53+1 rounds to 2^53).
const maxWhole = 1<<53 - 1

// Of is x as the database stores it: its shortest decimal form. x is
// finite (amounts are validated); NaN and infinities are 0.
func Of(x float64) Units {
	if x == math.Trunc(x) && math.Abs(x) <= maxWhole {
		return Units{f: x}
	}
	if r, ok := fraction(x); ok {
		return Units{r: r}
	}
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	if !ok {
		return Units{}
	}
	return Units{r: r}
}

// Parse reads numeric's text (a block's granted units; Text's), exactly:
// a float64 would round 499999999999999.999999 up to 5e14.
func Parse(s string) (Units, bool) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return Units{}, false
	}
	return whole(r), true
}

// whole is r, in f when it is a whole number that float64 holds exactly.
func whole(r *big.Rat) Units {
	if r.IsInt() && r.Num().IsInt64() {
		if n := r.Num().Int64(); n >= -maxWhole && n <= maxWhole {
			return Units{f: float64(n)}
		}
	}
	return Units{r: r}
}

// rat is u as a big.Rat (a new one when u is in f).
func (u Units) rat() *big.Rat {
	if u.r != nil {
		return u.r
	}
	return new(big.Rat).SetFloat64(u.f)
}

// Plus is u + v, exactly.
func (u Units) Plus(v Units) Units {
	if u.r == nil && v.r == nil {
		if s := u.f + v.f; math.Abs(s) <= maxWhole {
			return Units{f: s}
		}
	}
	return whole(new(big.Rat).Add(u.rat(), v.rat()))
}

// Minus is u - v, exactly.
func (u Units) Minus(v Units) Units {
	if v.r == nil {
		return u.Plus(Units{f: -v.f})
	}
	return u.Plus(Units{r: new(big.Rat).Neg(v.r)})
}

// Cmp compares u and v as big.Rat.Cmp does.
func (u Units) Cmp(v Units) int {
	if u.r == nil && v.r == nil {
		switch {
		case u.f < v.f:
			return -1
		case u.f > v.f:
			return 1
		}
		return 0
	}
	return u.rat().Cmp(v.rat())
}

// Sign is -1, 0 or 1 as u is below, at or above 0.
func (u Units) Sign() int { return u.Cmp(Units{}) }

// Approx is u as the nearest float64, for what only sizes or reports (a
// block's free units in Remaining, its prefetch).
func (u Units) Approx() float64 {
	if u.r == nil {
		return u.f
	}
	f, _ := u.r.Float64()
	return f
}

// Floor is the largest whole number at most u, as a float64: exact below
// 2^53, where Approx rounded first (to 2 for 1.99999999999999999).
func (u Units) Floor() float64 {
	if u.r == nil {
		return u.f
	}
	q := new(big.Int).Div(u.r.Num(), u.r.Denom()) // Euclidean: rounds down, the denominator being positive
	f, _ := new(big.Float).SetInt(q).Float64()
	return f
}

// Ratio is u / v as the nearest float64 (u and v exact: 0.99 of 1.1 is
// 0.9, where float64's 0.99 / 1.1 is 0.8999999999999999). Over a v of 0 it
// is float64's (an infinity, or NaN for 0 / 0).
func (u Units) Ratio(v Units) float64 {
	if v.r == nil { // v.f is 0 too when v is 0
		if u.r == nil {
			return u.f / v.f // one rounding, of exact operands
		}
		if v.f == 0 {
			return u.Approx() / v.f
		}
	}
	f, _ := new(big.Rat).Quo(u.rat(), v.rat()).Float64()
	return f
}

// Text writes u for a numeric parameter, exactly, in full and without an
// exponent.
func (u Units) Text() string {
	if u.r == nil {
		return strconv.FormatFloat(u.f, 'f', -1, 64)
	}
	// The denominator divides 10^scale: scale is its larger count of
	// factors 2 and 5 (a sum of decimals has no other).
	d := new(big.Int).Set(u.r.Denom())
	twos := d.TrailingZeroBits()
	d.Rsh(d, twos)
	fives := uint(0)
	five, m, one := big.NewInt(5), new(big.Int), big.NewInt(1)
	for d.Cmp(one) > 0 {
		d.QuoRem(d, five, m)
		fives++
	}
	return u.r.FloatString(int(max(twos, fives)))
}
