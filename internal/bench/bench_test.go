package bench

import (
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	if got := percentile(lat, 50); got != 50*time.Microsecond {
		t.Errorf("p50 of 1..100 µs = %s, want 50µs", got)
	}
	if got := percentile(lat, 99); got != 99*time.Microsecond {
		t.Errorf("p99 of 1..100 µs = %s, want 99µs", got)
	}
	if got := percentile(lat[:1], 99); got != time.Microsecond {
		t.Errorf("p99 of one sample = %s, want it", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %s, want 0", got)
	}
}

func TestExactWindowNeverRollsOver(t *testing.T) {
	t.Parallel()
	for _, now := range []time.Time{
		time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC),   // a window just started
		time.Date(2026, 5, 20, 12, 59, 30, 0, time.UTC), // 30 s before the hour
		time.Date(2026, 5, 20, 23, 59, 59, 0, time.UTC), // 1 s before the day
		time.Date(2026, 5, 20, 23, 59, 0, 0, time.UTC),  // a minute before the day
	} {
		w, err := exactWindow(now, 2*time.Second)
		if err != nil {
			t.Fatalf("exactWindow(%s): %v", now, err)
		}
		ws := int64(w / time.Second)
		left := time.Duration(ws-now.Unix()%ws) * time.Second
		if left <= 2*time.Second+time.Minute {
			t.Errorf("exactWindow(%s) = %s, which ends in %s", now, w, left)
		}
	}
}

func TestParseOnly(t *testing.T) {
	t.Parallel()
	got, err := ParseOnly(" w4, W1 ,w4")
	if err != nil || !slices.Equal(got, []string{"W4", "W1"}) {
		t.Errorf("ParseOnly = %v, %v; want [W4 W1]", got, err)
	}
	if got, err := ParseOnly(""); err != nil || got != nil {
		t.Errorf("ParseOnly(\"\") = %v, %v; want nothing", got, err)
	}
	if _, err := ParseOnly("W1,W9"); err == nil {
		t.Error("ParseOnly accepted W9")
	}
}
