package ratelimit

import "math"

// numberLiteral is what numericFits and numericTextLen read of a valid
// JSON number literal.
type numberLiteral struct {
	negative, nonzero  bool // a leading '-'; a digit other than 0
	whole, frac, zeros int  // digits before and after the point; leading zeros among them
	// exp is the exponent ("e-2" is -2), read up to maxExponent in
	// magnitude: numeric_in refuses one that big even for zero (expBig).
	exp    int
	expBig bool
}

// maxExponent bounds the exponent numeric_in accepts, in magnitude.
const maxExponent = math.MaxInt32 / 2

// readNumber reads a valid JSON number literal.
func readNumber(n []byte) numberLiteral {
	var l numberLiteral
	point := false
	i := 0
	if n[0] == '-' {
		l.negative = true
		i++
	}
	for ; i < len(n) && n[i] != 'e' && n[i] != 'E'; i++ {
		switch {
		case n[i] == '.':
			point = true
			continue
		case n[i] != '0':
			l.nonzero = true
		case !l.nonzero:
			l.zeros++
		}
		if point {
			l.frac++
		} else {
			l.whole++
		}
	}
	if i < len(n) { // n[i] is the e: a sign may follow, then at least one digit
		i++
		neg := n[i] == '-'
		if n[i] == '-' || n[i] == '+' {
			i++
		}
		for ; i < len(n); i++ {
			if l.exp = l.exp*10 + int(n[i]-'0'); l.exp >= maxExponent {
				l.expBig = true
				break
			}
		}
		if neg {
			l.exp = -l.exp
		}
	}
	return l
}

// numericFits reports whether a valid JSON number literal fits PostgreSQL's
// numeric: at most 131072 digits before the decimal point, counting those
// the exponent adds but not leading zeros, at most 16383 after it (the
// literal's fraction digits, trailing zeros included, minus its exponent),
// and an exponent below math.MaxInt32/2 in magnitude, which numeric_in
// refuses even for zero.
func numericFits(n []byte) bool {
	const maxWhole, maxScale = 131072, 16383
	l := readNumber(n)
	switch {
	case l.expBig, l.frac-l.exp > maxScale:
		return false
	}
	return !l.nonzero || l.whole-l.zeros+l.exp <= maxWhole
}

// numericTextLen is how long PostgreSQL writes a JSON number literal that
// numericFits accepts, as numeric_out does: its sign, every digit before
// the point ("0" when there is none), and as many after it as the literal
// has fraction digits minus its exponent ("1.50e-2" is "0.0150").
func numericTextLen(n []byte) int {
	l := readNumber(n)
	size := 1 // the digit before the point of a number below one
	if l.nonzero {
		size = max(l.whole-l.zeros+l.exp, 1)
		if l.negative {
			size++
		}
	}
	if scale := l.frac - l.exp; scale > 0 {
		size += 1 + scale
	}
	return size
}

// isNumberByte reports whether c can occur in a JSON number literal.
func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}
