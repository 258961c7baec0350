package ratelimit

import "github.com/pgadmit/pgadmit/internal/decimal"

// units is an amount as the database holds it, exactly (decimal.Units): a
// Local block counts its units so, and an ExceededError what its limit had
// left.
type units = decimal.Units

// remaining is what a limit had left after an admission of amount, the
// database having read used and reserved: subtracted exactly, as the
// database decided (in float64, ten tenths of a limit of 1 left
// -2.7755575615628914e-17), and never below 0, since the amount fit.
func remaining(limit, used, reserved, amount float64) float64 {
	left := decimal.Of(limit).Minus(decimal.Of(used)).Minus(decimal.Of(reserved)).Minus(decimal.Of(amount))
	return max(left.Approx(), 0)
}
