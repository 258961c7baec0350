// Package amounttext writes amounts (limits, estimates, what a counter
// holds, the bounds of a valid amount) as messages show them: in full and
// without an exponent, as numeric's text and the JSON of httpadmit's
// problems have them. %g wrote a limit of two million tokens as 2e+06 and
// a cost of 0.00001 as 1e-05.
package amounttext

import (
	"math"
	"strconv"
)

// Full writes v in full, without an exponent and without trailing zeros,
// with the fewest digits that read back as v: 2000000, 0.00001,
// 0.000000001, 1000000000000000. Valid amounts (ratelimit.MinAmount to
// MaxAmount) and sums of them stay far inside the range written so; a
// float64 outside it (an input refused as invalid, echoed back: 1e300,
// 5e-324) keeps %g's exponent rather than hundreds of digits. NaN and
// infinities are written as %g writes them.
func Full(v float64) string {
	return string(Append(nil, v))
}

// Append appends Full(v) to b, for a message built without fmt.
func Append(b []byte, v float64) []byte {
	if a := math.Abs(v); a != 0 && (a < minFull || a >= maxFull) {
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// minFull and maxFull bound the magnitudes Full writes without an
// exponent: at most 21 digits before the point, as encoding/json and
// JavaScript write numbers, and as many after it.
const (
	minFull = 1e-21
	maxFull = 1e21
)
