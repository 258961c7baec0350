package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
)

// inspect and bench's progress write durations as the rest of the CLI does: 1m, not 1m0s.
func TestInspectAndProgressWriteDurationsAsAnOperatorDoes(t *testing.T) {
	for in, want := range map[float64]string{59.6: "1m", 60: "1m", 3600: "1h", 5400: "1h30m", 42: "42s", 0.2: "0s"} {
		if got := seconds(in); got != want {
			t.Errorf("seconds(%v) = %q, want %q", in, got, want)
		}
	}
	var out bytes.Buffer
	benchProgress(&out, 10*time.Second, 1)(bench.Progress{Workload: "W1 window, many keys", Elapsed: 60 * time.Second, Total: 2 * time.Minute, Ops: 5, OpsPerS: 1})
	if want := "pgadmit bench: W1 window, many keys: 1m of 2m, 5 ops so far, 1 ops/s over the last 10s\n"; out.String() != want {
		t.Errorf("progress line %q, want %q", out.String(), want)
	}
}
