// Package plural writes a count with its noun as English reads it: "1 reservation", "2
// reservations", "0 reservations", in every message, line and log pgadmit writes for people.
package plural

import "strconv"

// Integer is any integer type a count may have.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// Count is n and the noun in the form n takes (Noun): Count(1, "row", "rows") is "1 row",
// Count(0, "row", "rows") "0 rows", Count(2, "entry", "entries") "2 entries". The noun may be
// several words, the form of each given whole ("lease expires", "leases expire").
func Count[N Integer](n N, one, many string) string {
	if n < 0 {
		return strconv.FormatInt(int64(n), 10) + " " + many
	}
	return strconv.FormatUint(uint64(n), 10) + " " + Noun(n, one, many)
}

// Noun is one when n is 1 and many otherwise (0 too), for a count written some other way
// ("10 or more problems").
func Noun[N Integer](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
