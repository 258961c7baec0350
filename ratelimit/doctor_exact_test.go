package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The doctor shows a problem's amounts exactly, as the database holds them.
// A counter's books are numeric sums of amounts, which may need more digits
// than a float64 holds: 1e14 and 1e-9 reserved (each a valid amount) are
// 100000000000000.000000001, and a counter one 1e-9 off holds
// 100000000000000.000000002. Both are 1e14 as float64, so the doctor said
// "expected 1e+14, actual 1e+14", hiding the very difference it reported.
// A sum is also shown without the trailing zeros numeric keeps (0.5 + 0.5
// is 1.0 there): 1, not 1.0.
func TestDoctorShowsExactAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	big, halves := uniqueKey("big"), uniqueKey("halves")
	hour := hourWindow(t, pool) // one window for all: each key's Reserves meet on one counter row
	reserve := func(key string, limit, amount float64) ratelimit.Grant {
		t.Helper()
		w := window("api_key", key, ratelimit.MetricTokens, limit, amount)
		w.Window = hour
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{w})
		if err != nil {
			t.Fatalf("Reserve %g of %s: %v", amount, key, err)
		}
		return g
	}
	g := reserve(big, ratelimit.MaxAmount, 1e14)
	reserve(big, ratelimit.MaxAmount, 1e-9)
	corruptCounter(t, pool, g.Reservations[0], 1e-9, 0)
	var h ratelimit.Grant
	for range 2 {
		h = reserve(halves, 10, 0.5)
		if _, err := l.Commit(ctx, h, map[string]float64{ratelimit.MetricTokens: 0.5}); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	corruptCounter(t, pool, h.Reservations[0], 0, 1e-9)

	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	if len(report.Problems) != 2 {
		t.Fatalf("Doctor: %s; want two problems: big's reserved and halves' used", report)
	}
	for _, want := range []struct {
		kind             ratelimit.ProblemKind
		key              string
		expected, actual string
		expF, actF       float64
	}{
		{ratelimit.ProblemCounterReserved, big, "100000000000000.000000001", "100000000000000.000000002", 1e14, 1e14},
		{ratelimit.ProblemCounterUsed, halves, "1", "1.000000001", 1, 1.000000001},
	} {
		var p *ratelimit.Problem
		for i := range report.Problems {
			if report.Problems[i].Kind == want.kind && report.Problems[i].ScopeKey == want.key {
				p = &report.Problems[i]
			}
		}
		if p == nil {
			t.Errorf("no %s of %s in %s", want.kind, want.key, report)
			continue
		}
		if p.ExpectedText != want.expected || p.ActualText != want.actual {
			t.Errorf("%s: ExpectedText, ActualText = %q, %q; want %q, %q", want.kind, p.ExpectedText, p.ActualText, want.expected, want.actual)
		}
		// The float64 fields stay, as the nearest float64 of those amounts.
		if p.Expected != want.expF || p.Actual != want.actF {
			t.Errorf("%s: Expected, Actual = %v, %v; want %v, %v", want.kind, p.Expected, p.Actual, want.expF, want.actF)
		}
		line := "expected " + want.expected + ", actual " + want.actual
		if s := p.String(); !strings.HasSuffix(s, line) {
			t.Errorf("%s: String() = %q; want it to end %q", want.kind, s, line)
		}
		if s := report.String(); !strings.Contains(s, line) {
			t.Errorf("report does not show %q:\n%s", line, s)
		}
	}
}

// A Problem built without the text of its amounts (by a caller's own code,
// or a test) is shown from its float64 amounts, in full and without an
// exponent, as numeric's text would be.
func TestProblemStringWithoutTextShowsTheFloats(t *testing.T) {
	t.Parallel()
	p := ratelimit.Problem{Kind: ratelimit.ProblemCounterReserved, ScopeType: "api_key", ScopeKey: "k", Metric: "tokens",
		Window: time.Minute, WindowStart: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), Expected: 1e14, Actual: 0.000001}
	want := "counter_reserved_mismatch: api_key:k tokens, window 1m from 2026-12-06T10:00:00Z: expected 100000000000000, actual 0.000001"
	if s := p.String(); s != want {
		t.Errorf("String() = %q\nwant        %q", s, want)
	}
}
