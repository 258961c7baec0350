package decimal

import (
	"math"
	"math/big"
	"strconv"
)

// fraction is Of of x when x is a fraction of at most maxScale decimals
// (0.1, 2.75, 1e-9: every fractional amount in practice), in 3
// allocations where big.Rat's SetString of x's text takes 9 or more; Of
// is on the path of every fractional limit and amount. Its shortest digits
// over their power of 10 are reduced to lowest terms here, in uint64, so
// that big.Rat has no GCD to take. Not ok for any other x (NaN, an
// infinity, a whole number, more decimals), which Of parses as before.
func fraction(x float64) (*big.Rat, bool) {
	digits, scale, ok := shortest(math.Abs(x))
	if !ok || scale <= 0 || scale > maxScale {
		return nil, false
	}
	num, den := digits, pow10[scale]
	g := gcd(num, den)
	r := new(big.Rat).SetUint64(num / g)
	// SetUint64 gave r a denominator (1), so Denom is a reference to it,
	// and setting it keeps lowest terms: r is num/den without a norm.
	r.Denom().SetUint64(den / g)
	if x < 0 {
		r.Neg(r)
	}
	return r, true
}

// shortest reads x's shortest decimal form (what pgx sends), as
// strconv's 'e' format writes it on the stack, as digits × 10^-scale:
// 1.25e-01 is 125 and 3. Not ok for text that is not d.ddde±dd (NaN,
// +Inf).
func shortest(x float64) (digits uint64, scale int, ok bool) {
	var buf [32]byte
	s := strconv.AppendFloat(buf[:0], x, 'e', -1, 64)
	mantissa := 0
	for mantissa < len(s) && s[mantissa] != 'e' {
		mantissa++
	}
	if mantissa == len(s) || mantissa > 18 { // 17 digits and a point at most
		return 0, 0, false
	}
	for i, c := range s[:mantissa] {
		switch {
		case c == '.' && i == 1:
			scale = mantissa - 2 // the digits after the point
		case '0' <= c && c <= '9':
			digits = digits*10 + uint64(c-'0')
		default:
			return 0, 0, false
		}
	}
	exp, err := strconv.Atoi(string(s[mantissa+1:]))
	if err != nil {
		return 0, 0, false
	}
	return digits, scale - exp, true
}

// maxScale is the most decimals fraction takes: 10^19 is the largest
// power of 10 a uint64 holds.
const maxScale = 19

// pow10 is 10^i for i up to maxScale.
var pow10 = func() (p [maxScale + 1]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// gcd is the greatest common divisor of a and b (Euclid's).
func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
