package ratelimit

import (
	"math"
	"math/big"
	"strconv"
)

// units is an amount as the database holds it, exactly: pgx sends a
// float64 to a numeric parameter as its shortest decimal form, so 0.1 is
// 0.1 there, not the binary fraction a float64 holds, and numeric adds
// such decimals exactly. A Local block counts its units this way: in
// float64, 0.3 plus 0.7000000000000001 is 1, and ten tenths are
// 0.9999999999999999. Whole numbers below 2^53, which float64 adds and
// compares exactly, stay in f, so that a block of tokens or requests
// pays nothing for exactness; any other value is a big.Rat in r. The zero
// value is 0.
type units struct {
	f float64  // the value when r is nil: a whole number, |f| <= maxWhole
	r *big.Rat // the value otherwise; never changed once set (values share it)
}

// maxWhole bounds the whole numbers kept in f: float64 holds every whole
// number up to 2^53, and a sum of two below 2^53 that float64 rounds to
// at most maxWhole was exact (one of 2^53 or more rounds to 2^53 or more,
// as 2^53+1 rounds to 2^53).
const maxWhole = 1<<53 - 1

// unitsOf is x as the database stores it. x is finite (amounts are
// validated).
func unitsOf(x float64) units {
	if x == math.Trunc(x) && math.Abs(x) <= maxWhole {
		return units{f: x}
	}
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	return units{r: r}
}

// parseUnits reads numeric's text (a block's granted units), exactly: a
// float64 would round 499999999999999.999999 up to 5e14.
func parseUnits(s string) (units, bool) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return units{}, false
	}
	return whole(r), true
}

// whole is r, in f when it is a whole number that float64 holds exactly.
func whole(r *big.Rat) units {
	if r.IsInt() && r.Num().IsInt64() {
		if n := r.Num().Int64(); n >= -maxWhole && n <= maxWhole {
			return units{f: float64(n)}
		}
	}
	return units{r: r}
}

// rat is u as a big.Rat (a new one when u is in f).
func (u units) rat() *big.Rat {
	if u.r != nil {
		return u.r
	}
	return new(big.Rat).SetFloat64(u.f)
}

// plus is u + v, exactly.
func (u units) plus(v units) units {
	if u.r == nil && v.r == nil {
		if s := u.f + v.f; math.Abs(s) <= maxWhole {
			return units{f: s}
		}
	}
	return whole(new(big.Rat).Add(u.rat(), v.rat()))
}

// minus is u - v, exactly.
func (u units) minus(v units) units {
	if v.r == nil {
		return u.plus(units{f: -v.f})
	}
	return u.plus(units{r: new(big.Rat).Neg(v.r)})
}

// cmp compares u and v as big.Rat.Cmp does.
func (u units) cmp(v units) int {
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

// sign is -1, 0 or 1 as u is below, at or above 0.
func (u units) sign() int { return u.cmp(units{}) }

// approx is u as a float64, for what only sizes or reports (a block's free
// units in Remaining, its prefetch).
func (u units) approx() float64 {
	if u.r == nil {
		return u.f
	}
	f, _ := u.r.Float64()
	return f
}

// text writes u for a numeric parameter, exactly.
func (u units) text() string {
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

// remaining is what a limit had left after an admission of amount, the
// database having read used and reserved: subtracted exactly, as the
// database decided (in float64, ten tenths of a limit of 1 left
// -2.7755575615628914e-17), and never below 0, since the amount fit.
func remaining(limit, used, reserved, amount float64) float64 {
	left := unitsOf(limit).minus(unitsOf(used)).minus(unitsOf(reserved)).minus(unitsOf(amount))
	return max(left.approx(), 0)
}
