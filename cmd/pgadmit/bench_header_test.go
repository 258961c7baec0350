package main

import (
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/bench"
)

func TestBenchHeaderSaysHowLongTheWorkloadsThatRunRun(t *testing.T) {
	for _, tc := range []struct {
		duration time.Duration
		only     []string
		want     string
	}{
		{6 * time.Second, nil, "6s per workload (W4, W5: 2s)"},
		{200 * time.Millisecond, nil, "200ms per workload (W4, W5: 2s; W9: 4s)"},
		{90 * time.Second, nil, "1m30s per workload (W4, W5: 2s)"},
		{2 * time.Minute, nil, "2m per workload (W4, W5: 2s)"},
		{6 * time.Second, []string{"W8"}, "6s per workload"},
		{time.Second, []string{"W3", "W9"}, "1s per workload (W9: 4s)"},
		{time.Second, []string{"W5"}, "1s per workload (W5: 2s)"},
		{4 * time.Second, []string{"W9", "W4"}, "4s per workload (W4: 2s)"},
	} {
		if got := benchRunLengths(bench.Config{Duration: tc.duration, Only: tc.only}); got != tc.want {
			t.Errorf("benchRunLengths(%s, %v) = %q, want %q", tc.duration, tc.only, got, tc.want)
		}
	}
}
