package locktimeout

import (
	"math"
	"testing"
	"time"
)

func TestMillis(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{1132 * time.Millisecond, 1132}, // 1000 * 1.132 in float seconds ceils to 1133
		{1257 * time.Millisecond, 1257},
		{5 * time.Second, 5000},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2}, // rounded up
		{time.Nanosecond, 1},         // never 0, which is none
		{time.Second + time.Nanosecond, 1001},
		{Max - time.Millisecond, math.MaxInt32 - 1},
		{Max, math.MaxInt32},
		{Max + time.Nanosecond, math.MaxInt32}, // capped
		{math.MaxInt64, math.MaxInt32},
		{0, 0},
		{-time.Second, 0},
	} {
		if got := Millis(c.d); got != c.want {
			t.Errorf("Millis(%s) = %d, want %d", c.d, got, c.want)
		}
	}
}

// Applied is Millis as a Duration: the bound the server gives up after, which errors name.
func TestApplied(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ d, want time.Duration }{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, time.Millisecond},
		{999 * time.Microsecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{1132 * time.Millisecond, 1132 * time.Millisecond},
		{Max, Max},
		{Max + time.Nanosecond, Max},
	} {
		if got := Applied(c.d); got != c.want {
			t.Errorf("Applied(%s) = %s, want %s", c.d, got, c.want)
		}
	}
}
