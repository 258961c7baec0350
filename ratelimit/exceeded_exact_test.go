package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal tells what its limit had left as the database's numeric
// subtracts it, exactly: a cost limit of 0.3 with 0.2 used read "has
// 0.09999999999999998 of 0.3 left" (float64's 0.3 - 0.2), and one of 0.4
// with 0.1 used and 0.2 reserved had Current 0.30000000000000004.
func TestExceededTellsWhatIsLeftExactly(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()

	used := hourLimits(t, pool, window("api_key", uniqueKey("k"), "cost", 0.3, 0.2))[0]
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{used})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}

	// 0.1 used and 0.2 reserved: a sum float64 makes 0.30000000000000004.
	both := hourLimits(t, pool, window("api_key", uniqueKey("k"), "cost", 0.4, 0.1))[0]
	g, err = l.Reserve(ctx, "", "", []ratelimit.Limit{both})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	both.Amount = 0.2
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{both}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}

	for _, c := range []struct {
		name    string
		lim     ratelimit.Limit
		current float64
		left    string
		message string
	}{
		{"0.2 used of 0.3", used, 0.2, "0.1", "has 0.1 of 0.3 left, 0.2 needed;"},
		{"0.1 used and 0.2 reserved of 0.4", both, 0.3, "0.1", "has 0.1 of 0.4 left, 0.2 needed;"},
	} {
		var e *ratelimit.ExceededError
		if err := reserveErr(ctx, l, c.lim); !errors.As(err, &e) {
			t.Errorf("%s: %v, want an *ExceededError", c.name, err)
			continue
		}
		if e.Current != c.current || e.Projected != c.current+c.lim.Amount {
			t.Errorf("%s: Current %v, Projected %v; want %v and %v", c.name, e.Current, e.Projected, c.current, c.current+c.lim.Amount)
		}
		if got := e.RemainingText(); got != c.left {
			t.Errorf("%s: RemainingText %q, want %q", c.name, got, c.left)
		}
		if got := e.Remaining(); got != 0.1 {
			t.Errorf("%s: Remaining %v, want 0.1", c.name, got)
		}
		if !strings.Contains(e.Error(), c.message) {
			t.Errorf("%s: message %q, want it to say %q", c.name, e.Error(), c.message)
		}
	}
}

// Remaining and RemainingText work on an *ExceededError built by hand too
// (httpadmit's tests and a caller's fakes build them), and are never below
// 0 (a counter over its limit: a lowered limit, an overage committed); a
// difference with more digits than a float64 holds is exact in the text.
func TestExceededRemainingOfAnyError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit, current float64
		left           float64
		text           string
	}{
		{2.5, 1.8, 0.7, "0.7"},
		{0.3, 0.2, 0.1, "0.1"},
		{3, 3, 0, "0"},
		{10, 12.5, 0, "0"},
		{2_000_000, 1_999_000, 1000, "1000"},
		{1e15, 1e-9, 1e15, "999999999999999.999999999"},
		{0, 0, 0, "0"},
	} {
		e := &ratelimit.ExceededError{Limit: c.limit, Current: c.current}
		if got, text := e.Remaining(), e.RemainingText(); got != c.left || text != c.text {
			t.Errorf("limit %v, current %v: Remaining %v, RemainingText %q; want %v and %q", c.limit, c.current, got, text, c.left, c.text)
		}
	}
}
