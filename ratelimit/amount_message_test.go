package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The messages of a *ValidationError write amounts, and the bounds of a
// valid one, in full, without an exponent: a limit above the maximum read
// "invalid Limits[0].Limit (2e+15): must be at most 1e+15", and httpadmit
// passes the reason on to HTTP clients in its 400 problems. A value far
// outside any amount's range (1e300) keeps its exponent, not 301 digits.
func TestValidationMessagesWriteAmountsInFull(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	const id = "123e4567-e89b-12d3-a456-426614174000"
	key := uniqueKey("k")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a limit above the maximum", reserveErr(ctx, l, window("api_key", key, ratelimit.MetricTokens, 2e15, 1)),
			"ratelimit: invalid Limits[0].Limit (2000000000000000): must be at most 1000000000000000"},
		{"an amount below the minimum", reserveErr(ctx, l, window("api_key", key, "cost", 1, 5e-10)),
			"ratelimit: invalid Limits[0].Amount (0.0000000005): must be zero or at least 0.000000001"},
		{"ValidateAmount of a value with many digits", ratelimit.ValidateAmount(2_500_000.5e9),
			"ratelimit: invalid value (2500000500000000): must be at most 1000000000000000"},
		{"ValidateAmount far out of range", ratelimit.ValidateAmount(1e300),
			"ratelimit: invalid value (1e+300): must be at most 1000000000000000"},
		{"an event's progress", appendEventErr(ctx, l, id, ratelimit.Event{Type: "progress", Progress: -2e15}),
			"ratelimit: invalid Event.Progress (-2000000000000000): must be zero or a finite number of magnitude 0.000000001 to 1000000000000000"},
	} {
		var v *ratelimit.ValidationError
		if !errors.As(c.err, &v) {
			t.Errorf("%s: %v, want a *ValidationError", c.name, c.err)
			continue
		}
		if got := v.Error(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// The messages of an *ExceededError write amounts in full, without an
// exponent: a tokens limit of two million (a common tokens-a-minute
// limit) read "of 2e+06", and an amount of 0.00001 "1e-05 needed".
func TestExceededMessagesWriteAmountsInFull(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	// An hour's window (or a few minutes more) with a minute left: both
	// Reserves meet one counter.
	full := hourLimits(t, pool, window("api_key", uniqueKey("k"), ratelimit.MetricTokens, 2_000_000, 2_000_000))[0]
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{full}); err != nil {
		t.Fatalf("first Reserve: %v", err)
	}
	full.Amount = 0.00001
	scope := full.Scope.Type + ":" + full.Scope.Key
	tooBig := window("api_key", uniqueKey("k"), "cost", 0.00001, 0.00002)
	conc := concurrent("model", uniqueKey("m"), 2_000_000)
	conc.Amount = 2_000_000
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{conc}); err != nil {
		t.Fatalf("Reserve of every slot: %v", err)
	}
	concTooBig := concurrent("model", uniqueKey("m"), 2_000_000)
	concTooBig.Amount = 3_000_000
	for _, c := range []struct {
		name       string
		lim        ratelimit.Limit
		want, rest string // rest: what follows want, "" when want is all of it
	}{
		{"window full", full, "rate limit exceeded: tokens window of " + scope + " has 0 of 2000000 left, 0.00001 needed; retry after ", "s"},
		{"amount above the limit", tooBig, "rate limit exceeded: cost amount 0.00002 is greater than limit 0.00001 on api_key:" + tooBig.Scope.Key, ""},
		{"concurrent full", conc, "rate limit exceeded: concurrent active 2000000 plus request 2000000 is greater than limit 2000000 on model:" + conc.Scope.Key, ""},
		{"concurrent amount above the limit", concTooBig,
			"rate limit exceeded: concurrent amount 3000000 is greater than limit 2000000 on model:" + concTooBig.Scope.Key, ""},
	} {
		err := reserveErr(ctx, l, c.lim)
		var e *ratelimit.ExceededError
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want an *ExceededError", c.name, err)
			continue
		}
		got := e.Error()
		if c.rest == "" && got != c.want || c.rest != "" && (!strings.HasPrefix(got, c.want) || !strings.HasSuffix(got, c.rest)) {
			t.Errorf("%s:\n got %q\nwant %q…%q", c.name, got, c.want, c.rest)
		}
	}
}

func reserveErr(ctx context.Context, l *ratelimit.Limiter, limits ...ratelimit.Limit) error {
	_, err := l.Reserve(ctx, "", "", limits)
	return err
}

func appendEventErr(ctx context.Context, l *ratelimit.Limiter, id string, e ratelimit.Event) error {
	_, err := l.AppendEvent(ctx, id, id, e)
	return err
}
