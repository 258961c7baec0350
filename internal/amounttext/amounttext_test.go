package amounttext

import (
	"math"
	"strconv"
	"testing"
)

func TestFull(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0:                     "0",
		math.Copysign(0, -1):  "-0",
		1:                     "1",
		-5:                    "-5",
		2_000_000:             "2000000",
		1234567:               "1234567",
		0.00001:               "0.00001",
		1e-9:                  "0.000000001",
		1.2345678901234566e-9: "0.0000000012345678901234566",
		1e15:                  "1000000000000000",
		499999999999999.9:     "499999999999999.9",
		0.30000000000000004:   "0.30000000000000004", // 0.1 + 0.2 in float64
		1e-21:                 "0.000000000000000000001",
		9.99e20:               "999000000000000000000",
		1e21:                  "1e+21",
		9e-22:                 "9e-22",
		-1e300:                "-1e+300",
		5e-324:                "5e-324",
		math.Inf(1):           "+Inf",
		math.Inf(-1):          "-Inf",
	} {
		if got := Full(v); got != want {
			t.Errorf("Full(%g) = %q, want %q", v, got, want)
		}
		if got := string(Append([]byte("x "), v)); got != "x "+want {
			t.Errorf("Append(x, %g) = %q, want %q", v, got, "x "+want)
		}
		if back, err := strconv.ParseFloat(want, 64); err != nil || back != v && !math.IsNaN(v) {
			t.Errorf("%q reads back as %g, %v; want %g", want, back, err, v)
		}
	}
	if got := Full(math.NaN()); got != "NaN" {
		t.Errorf("Full(NaN) = %q, want NaN", got)
	}
}
