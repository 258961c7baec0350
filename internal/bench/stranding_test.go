package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// W9 drives one key far past its limit from Local blocks in four instances
// and reads back every window that refused a request: none admitted past
// the limit, and what each left unadmitted is within the bound, with at
// least one such window (the limit was reached).
func TestW9MeasuresStrandingWithinItsBound(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	out, err := Run(context.Background(), pool, Config{Workers: 8, Duration: 3 * time.Second, Only: []string{"W9"}}, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("Run W9: %+v, %v", out, err)
	}
	res := out[0]
	if !res.OK || res.Admitted == 0 || res.Rejected == 0 || res.LocalBlocks == 0 {
		t.Fatalf("W9: ok %t, %d admitted, %d refused, %d blocks, %d errors (%s), checks %+v; want every check passed, admissions from blocks and refusals",
			res.OK, res.Admitted, res.Rejected, res.LocalBlocks, res.Errors, res.FirstError, res.Checks)
	}
	stranded := checkNamed(res.Checks, "window limit 2000: units stranded in blocks")
	if stranded == nil || !stranded.AtMost || stranded.Want != 1000 || strings.Contains(stranded.Name, " 0 windows that refused") {
		t.Errorf("W9: stranding check %+v; want at most 1000 (4 instances x 2 x 1/16 x 2000) over windows that refused", stranded)
	}
	if checkNamed(res.Checks, "window limit 2000: admitted past it") == nil {
		t.Errorf("W9: checks %+v, want one of admissions past the limit", res.Checks)
	}
}

// strandingChecks fails a window that admitted past its limit, one that
// refused a request and left more units unadmitted than the bound (only
// those are read for it), and a run in which no window refused.
func TestStrandingChecksFailPastTheLimitAndPastTheBound(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 5, 12, 0, 2, 0, time.UTC)
	window := func(reset time.Time, used float64) db.CounterListByScopeRow {
		return db.CounterListByScopeRow{ResetAt: reset, UsedValue: used, LimitValue: strandLimit}
	}
	refused := map[time.Time]bool{end: true}
	for _, tc := range []struct {
		name               string
		windows            []db.CounterListByScopeRow
		refused            map[time.Time]bool
		overOK, strandedOK bool
		stranded           int64
	}{
		{"within the bound", []db.CounterListByScopeRow{window(end, 1990)}, refused, true, true, 10},
		{"a window that did not refuse is not read", []db.CounterListByScopeRow{window(end, 2000), window(end.Add(2*time.Second), 3)}, refused, true, true, 0},
		{"past the bound", []db.CounterListByScopeRow{window(end, 999)}, refused, true, false, 1001},
		{"past the limit", []db.CounterListByScopeRow{window(end, 2001)}, refused, false, true, 0},
		// Admitting past the limit is wrong in any window, one that refused nothing (the run's
		// last, say) too.
		{"past the limit in a window that did not refuse", []db.CounterListByScopeRow{window(end, 1990), window(end.Add(2*time.Second), 2001)}, refused, false, true, 10},
		{"no window refused", []db.CounterListByScopeRow{window(end, 2000)}, map[time.Time]bool{}, true, false, 0},
	} {
		checks := strandingChecks(tc.windows, tc.refused, 4)
		if len(checks) != 2 || checks[0].OK != tc.overOK || checks[1].OK != tc.strandedOK || checks[1].Got != tc.stranded || checks[1].Want != 1000 {
			t.Errorf("%s: %+v; want past the limit ok %t, stranding ok %t with %d of at most 1000", tc.name, checks, tc.overOK, tc.strandedOK, tc.stranded)
		}
	}
}

// W9 runs two of its windows (MinStrandingDuration) however short Duration is, and its
// progress says so: the total it reports is how long it runs, and it is reported past
// Duration. With Duration as its total, a 1 s run of W9 reported "900ms of 1s" and then
// nothing for its last 3 s, as if its time were up.
func TestW9ProgressCountsItsOwnLength(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reports []Progress
	cfg := Config{Workers: 4, Duration: 500 * time.Millisecond, Only: []string{"W9"}, ProgressEvery: 250 * time.Millisecond,
		Progress: func(p Progress) { mu.Lock(); reports = append(reports, p); mu.Unlock() }}
	out, err := Run(context.Background(), pgtest.NewPool(t), cfg, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("Run W9: %+v, %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var last time.Duration
	for _, p := range reports {
		if p.Total != MinStrandingDuration {
			t.Errorf("W9 progress %+v: total %s, want the %s it runs", p, p.Total, MinStrandingDuration)
		}
		last = max(last, p.Elapsed)
	}
	if last < 2*time.Second {
		t.Errorf("W9 of %s: last progress at %s (%d reports), want reports until near its end", MinStrandingDuration, last, len(reports))
	}
}
