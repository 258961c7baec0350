package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every invalid field is refused with a *ValidationError naming it, and
// nothing is written.
func TestInvalidInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	valid := func() ratelimit.Limit { return window("api_key", "k", "tokens", 100, 10) }
	with := func(edit func(*ratelimit.Limit)) []ratelimit.Limit {
		good, bad := valid(), valid()
		good.Metric = "requests"
		edit(&bad)
		return []ratelimit.Limit{good, bad} // the bad one second: nothing of the first may be written either
	}
	const goodTask = "123e4567-e89b-12d3-a456-426614174000"
	tests := []struct {
		name      string
		taskID    string
		attemptID string
		limits    []ratelimit.Limit
		field     string
	}{
		{"empty scope type", "", "", with(func(l *ratelimit.Limit) { l.Scope.Type = "" }), "Limits[1].Scope.Type"},
		{"blank scope key", "", "", with(func(l *ratelimit.Limit) { l.Scope.Key = "  " }), "Limits[1].Scope.Key"},
		{"empty metric", "", "", with(func(l *ratelimit.Limit) { l.Metric = "" }), "Limits[1].Metric"},
		{"NUL in key", "", "", with(func(l *ratelimit.Limit) { l.Scope.Key = "a\x00b" }), "Limits[1].Scope.Key"},
		{"invalid UTF-8", "", "", with(func(l *ratelimit.Limit) { l.Scope.Type = "\xff" }), "Limits[1].Scope.Type"},
		{"key too long", "", "", with(func(l *ratelimit.Limit) { l.Scope.Key = strings.Repeat("k", 513) }), "Limits[1].Scope.Key"},
		{"queue_size", "", "", with(func(l *ratelimit.Limit) { l.Metric = ratelimit.MetricQueueSize }), "Limits[1].Metric"},
		{"NaN amount", "", "", with(func(l *ratelimit.Limit) { l.Amount = math.NaN() }), "Limits[1].Amount"},
		{"+Inf amount", "", "", with(func(l *ratelimit.Limit) { l.Amount = math.Inf(1) }), "Limits[1].Amount"},
		{"negative amount", "", "", with(func(l *ratelimit.Limit) { l.Amount = -1 }), "Limits[1].Amount"},
		{"NaN limit", "", "", with(func(l *ratelimit.Limit) { l.Limit = math.NaN() }), "Limits[1].Limit"},
		{"-Inf limit", "", "", with(func(l *ratelimit.Limit) { l.Limit = math.Inf(-1) }), "Limits[1].Limit"},
		{"negative limit", "", "", with(func(l *ratelimit.Limit) { l.Limit = -5 }), "Limits[1].Limit"},
		{"huge limit", "", "", with(func(l *ratelimit.Limit) { l.Limit = 1.7e308 }), "Limits[1].Limit"},
		{"huge amount", "", "", with(func(l *ratelimit.Limit) { l.Amount = ratelimit.MaxAmount * 2 }), "Limits[1].Amount"},
		{"negative window", "", "", with(func(l *ratelimit.Limit) { l.Window = -time.Second }), "Limits[1].Window"},
		{"fractional window", "", "", with(func(l *ratelimit.Limit) { l.Window = 1500 * time.Millisecond }), "Limits[1].Window"},
		{"absurd window", "", "", with(func(l *ratelimit.Limit) { l.Window = 400 * 24 * time.Hour }), "Limits[1].Window"},
		{"negative lease TTL", "", "", with(func(l *ratelimit.Limit) { l.Metric, l.LeaseTTL = ratelimit.MetricConcurrent, -time.Second }), "Limits[1].LeaseTTL"},
		{"absurd lease TTL", "", "", with(func(l *ratelimit.Limit) { l.Metric, l.LeaseTTL = ratelimit.MetricConcurrent, 48*time.Hour }), "Limits[1].LeaseTTL"},
		{"duplicate limit", "", "", append(with(func(*ratelimit.Limit) {}), valid()), "Limits[2]"},
		{"too many limits", "", "", make([]ratelimit.Limit, ratelimit.MaxLimitsPerCall+1), "Limits"},
		{"malformed task id", "not-a-uuid", "", with(func(*ratelimit.Limit) {}), "TaskID"},
		{"task id with braces", "{" + goodTask + "}", "", with(func(*ratelimit.Limit) {}), "TaskID"},
		{"malformed attempt id", goodTask, "123", with(func(*ratelimit.Limit) {}), "AttemptID"},
	}
	before := rowCounts(t, pool)
	for _, tc := range tests {
		_, err := l.Reserve(ctx, tc.taskID, tc.attemptID, tc.limits)
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Errorf("%s: Reserve err = %v, want *ValidationError", tc.name, err)
			continue
		}
		if invalid.Field != tc.field {
			t.Errorf("%s: Field = %q, want %q (%v)", tc.name, invalid.Field, tc.field, err)
		}
		if tc.taskID == "" && tc.attemptID == "" {
			if err := l.Check(ctx, tc.limits); !errors.As(err, &invalid) || invalid.Field != tc.field {
				t.Errorf("%s: Check err = %v, want *ValidationError on %s", tc.name, err, tc.field)
			}
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("invalid input wrote rows (-before +after):\n%s", diff)
	}

	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{valid()})
	if err != nil {
		t.Fatal(err)
	}
	after := rowCounts(t, pool)
	for name, actual := range map[string]float64{"NaN": math.NaN(), "negative": -3, "+Inf": math.Inf(1), "huge": 1.7e308} {
		_, err := l.Commit(ctx, grant, map[string]float64{"tokens": actual})
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != `actual["tokens"]` {
			t.Errorf("Commit with %s actual: err = %v, want *ValidationError on actual[\"tokens\"]", name, err)
		}
	}
	bad := grant
	bad.Reservations = []ratelimit.Reservation{{ID: "nope"}}
	if _, err := l.Release(ctx, bad, "x"); !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Errorf("Release of a malformed grant: err = %v, want ErrInvalidInput", err)
	}
	if _, err := l.RenewLeases(ctx, []ratelimit.Lease{{ID: "nope"}}); !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Errorf("RenewLeases of a malformed lease: err = %v, want ErrInvalidInput", err)
	}
	if _, err := l.Attach(ctx, "nope", grant); !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Errorf("Attach to a malformed attempt: err = %v, want ErrInvalidInput", err)
	}
	if diff := cmp.Diff(after, rowCounts(t, pool)); diff != "" {
		t.Errorf("invalid settle input wrote rows (-before +after):\n%s", diff)
	}
	assertCounter(t, pool, "k", "tokens", 0, 10)
}
