package durationtext

import (
	"testing"
	"time"
)

func TestOperator(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		24 * time.Hour:                    "24h",
		168 * time.Hour:                   "168h",
		time.Minute:                       "1m",
		90 * time.Minute:                  "1h30m",
		time.Hour + 30*time.Second:        "1h0m30s",
		30 * time.Second:                  "30s",
		90 * time.Second:                  "1m30s",
		500 * time.Millisecond:            "500ms",
		1500 * time.Millisecond:           "1.5s",
		10*time.Minute + time.Millisecond: "10m0.001s",
		0:                                 "0s",
	} {
		if got := Operator(d); got != want {
			t.Errorf("Operator(%s) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(Operator(d)); err != nil || back != d {
			t.Errorf("Operator(%s) = %q reads back as %s, %v", d, Operator(d), back, err)
		}
	}
}
