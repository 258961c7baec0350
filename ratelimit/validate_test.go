package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"slices"
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
		{"tiny amount", "", "", with(func(l *ratelimit.Limit) { l.Amount = 1e-300 }), "Limits[1].Amount"},
		{"tiny limit", "", "", with(func(l *ratelimit.Limit) { l.Limit = ratelimit.MinAmount / 2 }), "Limits[1].Limit"},
		{"negative window", "", "", with(func(l *ratelimit.Limit) { l.Window = -time.Second }), "Limits[1].Window"},
		{"fractional window", "", "", with(func(l *ratelimit.Limit) { l.Window = 1500 * time.Millisecond }), "Limits[1].Window"},
		{"absurd window", "", "", with(func(l *ratelimit.Limit) { l.Window = 400 * 24 * time.Hour }), "Limits[1].Window"},
		{"negative lease TTL", "", "", with(func(l *ratelimit.Limit) { l.Metric, l.LeaseTTL = ratelimit.MetricConcurrent, -time.Second }), "Limits[1].LeaseTTL"},
		{"absurd lease TTL", "", "", with(func(l *ratelimit.Limit) { l.Metric, l.LeaseTTL = ratelimit.MetricConcurrent, 48*time.Hour }), "Limits[1].LeaseTTL"},
		{"duplicate limit", "", "", append(with(func(*ratelimit.Limit) {}), valid()), "Limits[2]"},
		{"duplicate concurrent limit", "", "", []ratelimit.Limit{
			concurrent("model", "m", 5),
			{Scope: ratelimit.Scope{Type: "model", Key: "m"}, Metric: ratelimit.MetricConcurrent, Limit: 9, Amount: 1, Window: time.Hour},
		}, "Limits[1]"},
		{"too many limits", "", "", make([]ratelimit.Limit, ratelimit.MaxLimitsPerCall+1), "Limits"},
		{"malformed task id", "not-a-uuid", "", with(func(*ratelimit.Limit) {}), "TaskID"},
		{"task id with braces", "{" + goodTask + "}", "", with(func(*ratelimit.Limit) {}), "TaskID"},
		{"malformed attempt id", goodTask, "123", with(func(*ratelimit.Limit) {}), "AttemptID"},
		{"task id with other separators", strings.ReplaceAll(goodTask, "-", "+"), "", with(func(*ratelimit.Limit) {}), "TaskID"},
		{"attempt id with NUL separators", goodTask, strings.ReplaceAll(goodTask, "-", "\x00"), with(func(*ratelimit.Limit) {}), "AttemptID"},
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
		// A limit that is bad on its own says so by itself, field relative
		// to the limit.
		if field, alone := strings.CutPrefix(tc.field, "Limits[1]."); alone {
			if err := tc.limits[1].Validate(); !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) || invalid.Field != field {
				t.Errorf("%s: Validate err = %v, want *ValidationError on %s", tc.name, err, field)
			}
		}
	}
	if err := valid().Validate(); err != nil {
		t.Errorf("Validate of a valid limit: %v", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("invalid input wrote rows (-before +after):\n%s", diff)
	}

	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{valid()})
	if err != nil {
		t.Fatal(err)
	}
	after := rowCounts(t, pool)
	for name, actual := range map[string]float64{"NaN": math.NaN(), "negative": -3, "+Inf": math.Inf(1), "huge": 1.7e308, "tiny": 1e-300} {
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
	var invalidLease *ratelimit.ValidationError
	if _, err := l.RenewLeases(ctx, []ratelimit.Lease{{ID: goodTask}, {ID: "nope"}}); !errors.As(err, &invalidLease) || invalidLease.Field != "Leases.ID[1]" {
		t.Errorf("RenewLeases of a malformed lease: err = %v, want a *ValidationError on Leases.ID[1]", err)
	}
	if _, err := l.RenewLeases(ctx, []ratelimit.Lease{{ID: goodTask}, {ID: strings.Replace(goodTask, "4000", "4001", 1), TTL: 1500 * time.Millisecond}}); !errors.As(err, &invalidLease) || invalidLease.Field != "Leases.TTL[1]" {
		t.Errorf("RenewLeases with a fractional TTL: err = %v, want a *ValidationError on Leases.TTL[1]", err)
	}
	if _, err := l.RenewLeases(ctx, []ratelimit.Lease{{ID: strings.ReplaceAll(goodTask, "-", "x")}}); !errors.As(err, &invalidLease) || invalidLease.Field != "Leases.ID[0]" {
		t.Errorf("RenewLeases of a lease id with other separators: err = %v, want a *ValidationError on Leases.ID[0]", err)
	}
	if _, err := l.Attach(ctx, "nope", grant); !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Errorf("Attach to a malformed attempt: err = %v, want ErrInvalidInput", err)
	}
	if diff := cmp.Diff(after, rowCounts(t, pool)); diff != "" {
		t.Errorf("invalid settle input wrote rows (-before +after):\n%s", diff)
	}
	assertCounter(t, pool, "k", "tokens", 0, 10)
}

// The reason Release and ReleaseLeases record is text like any other: a NUL
// byte, invalid UTF-8 or an oversized reason is a *ValidationError naming
// it, before anything is sent; the grant stays open.
func TestReleaseReasonIsValidated(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 100, 10), concurrent("model", key, 5)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	before := summary(t, pool)
	for name, reason := range map[string]string{
		"NUL":       "bad\x00reason",
		"not UTF-8": "bad\xffreason",
		"too long":  strings.Repeat("r", ratelimit.MaxReasonBytes+1),
	} {
		_, err := l.Release(ctx, grant, reason)
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) || invalid.Field != "reason" {
			t.Errorf("Release with a %s reason: err = %v, want a *ValidationError on reason", name, err)
		}
		_, err = l.ReleaseLeases(ctx, grant.Leases, reason)
		if !errors.As(err, &invalid) || invalid.Field != "reason" {
			t.Errorf("ReleaseLeases with a %s reason: err = %v, want a *ValidationError on reason", name, err)
		}
	}
	if diff := cmp.Diff(before, summary(t, pool)); diff != "" {
		t.Fatalf("refused releases changed the books (-before +after):\n%s", diff)
	}
	// The longest valid reason is recorded.
	s, err := l.Release(ctx, grant, strings.Repeat("é", ratelimit.MaxReasonBytes/2))
	if err != nil || s.LeasesReleased != 1 || !s.Reservations[0].Settled {
		t.Fatalf("Release with a %d-byte reason = %+v, %v", ratelimit.MaxReasonBytes, s, err)
	}
}

// Amounts are stored exactly as their shortest decimal form, so validation
// bounds how small a non-zero amount may be: whatever is admitted and
// committed, no stored amount or sum has more than 25 digits after the
// decimal point (1e-300 would have had 300).
func TestStoredAmountsHaveABoundedScale(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	finest := ratelimit.MinAmount * 1.2345678901234567 // 17 significant digits at the smallest magnitude
	for _, amount := range []float64{finest, ratelimit.MinAmount, 0.1, 1.0 / 3, ratelimit.MaxAmount / 3} {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "cost", ratelimit.MaxAmount, amount)})
		if err != nil {
			t.Fatalf("Reserve(%g): %v", amount, err)
		}
		if _, err := l.Commit(ctx, g, map[string]float64{"cost": amount / 7}); err != nil && !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Fatalf("Commit(%g): %v", amount/7, err)
		}
	}
	running := startSync(t, l, time.Minute)
	if _, err := l.AppendEvent(ctx, running.ID, running.ExecutionToken, ratelimit.Event{Type: "x", Progress: -1e-300}); !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Fatalf("AppendEvent with progress -1e-300: err = %v, want ErrInvalidInput", err)
	}
	scales, err := testq.AmountScales(ctx, pool)
	if err != nil {
		t.Fatalf("AmountScales: %v", err)
	}
	if scales.Counters > 25 || scales.Reservations > 25 || scales.Reservations < 20 {
		t.Fatalf("stored scales = %+v, want at most 25 (and the finest amount's, over 20, kept exactly)", scales)
	}
	assertBooksBalance(t, pool, "api_key", key)
}

// Limits are the same only when scope type, scope key, metric and window
// are all equal: text that differs only in where it splits between type and
// key, or one window limit in two windows, is two limits.
func TestDistinctLimitsAreNotDuplicates(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	limits := []ratelimit.Limit{
		window("a b", key, "tokens", 100, 1),
		window("a", "b "+key, "tokens", 100, 1),
		{Scope: ratelimit.Scope{Type: "a", Key: "b " + key}, Metric: "tokens", Limit: 100, Amount: 1, Window: time.Hour},
	}
	grant, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve of three distinct limits: %v", err)
	}
	if len(grant.Reservations) != len(limits) {
		t.Errorf("Reserve wrote %d reservations, want %d", len(grant.Reservations), len(limits))
	}
}

// Commit charges a reservation's estimate (the grant's Amount) when actual
// has no amount for its metric: that estimate is validated as an actual
// amount is, so a grant that came back altered (stored, decoded, built by
// hand) is refused with a *ValidationError naming it before anything is
// written, instead of writing NaN or +Inf into its window's counter (where
// NaN refuses every later admission of the window) or failing on a CHECK.
func TestCommitValidatesTheEstimateItCharges(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 100, 1), window("api_key", key, "tokens", 100, 10)})
	if err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, pool)
	altered := grant
	altered.Reservations = slices.Clone(grant.Reservations)
	for name, amount := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "negative": -5, "huge": 1e300, "tiny": 1e-300} {
		altered.Reservations[1].Amount = amount
		_, err := l.Commit(ctx, altered, nil)
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != "Reservations[1].Amount" {
			t.Errorf("Commit of a grant with a %s estimate: err = %v, want a *ValidationError on Reservations[1].Amount", name, err)
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("refused commits wrote rows (-before +after):\n%s", diff)
	}
	assertCounter(t, pool, key, "tokens", 0, 10)
	assertCounter(t, pool, key, "requests", 0, 1)

	// An actual amount for the metric is what is charged: the estimate is
	// not read, and the commit goes through.
	if _, err := l.Commit(ctx, altered, map[string]float64{"tokens": 7}); err != nil {
		t.Fatalf("Commit with an actual amount for the altered estimate's metric: %v", err)
	}
	assertCounter(t, pool, key, "tokens", 7, 0)
	assertCounter(t, pool, key, "requests", 1, 0)
	assertBooksBalance(t, pool, "api_key", key)
}

// An ExceededError made by hand (in a caller's test, say) still says what
// it is.
func TestExceededErrorOfZeroValueSaysLimitExceeded(t *testing.T) {
	t.Parallel()
	if got, want := (&ratelimit.ExceededError{}).Error(), ratelimit.ErrExceeded.Error(); got != want {
		t.Errorf("(&ExceededError{}).Error() = %q, want %q", got, want)
	}
}

// Commit given several actual amounts that are not valid names the same
// one every time, the least metric: it named whichever the map's random
// order met first, so that one call could log actual["tokens"] and the
// next, with the same arguments, actual["cost"].
func TestCommitNamesTheSameBadActualEveryTime(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	actual := map[string]float64{"tokens": math.NaN(), "cost": -1, "requests": 1, "images": math.Inf(1), "zzz": 2e15}
	for range 50 {
		_, err := l.Commit(context.Background(), ratelimit.Grant{}, actual)
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != `actual["cost"]` || invalid.Value != -1.0 {
			t.Fatalf("Commit with bad actual amounts of cost, images, tokens and zzz: err = %v, want a *ValidationError on actual[\"cost\"] (-1)", err)
		}
	}
}

// Limit.Validate allocates nothing for a valid limit, as its doc says: a
// caller may check every limit of every request with it. A field name or
// message built before a failure allocates once per call.
func TestValidateAllocatesNothingForAValidLimit(t *testing.T) {
	local := window("api_key", "key", ratelimit.MetricTokens, 1000, 1)
	local.Local = true
	for _, limit := range []ratelimit.Limit{
		local,
		{Scope: ratelimit.Scope{Type: "api_key", Key: "key"}, Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1, Window: time.Minute},
		{Scope: ratelimit.Scope{Type: "model", Key: "gpt-4o"}, Metric: ratelimit.MetricConcurrent, Limit: 50, Amount: 0.5, LeaseTTL: time.Minute},
	} {
		if err := limit.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v, want nil", limit, err)
		}
		if allocs := testing.AllocsPerRun(100, func() { _ = limit.Validate() }); allocs != 0 {
			t.Errorf("Validate(%+v) allocated %v times per call, want 0", limit, allocs)
		}
	}
}
