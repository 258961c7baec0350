package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The messages of a refusal and of a duplicate limit show the scope as
// Doctor and inspect do (textcell.Scope): type "tier:gold" with key "c" and
// type "tier" with key "gold:c" were both tier:gold:c, and a key with a
// space or a newline reached the caller's log raw. A plain scope is shown
// as it always was.
func TestScopeInMessagesIsUnambiguous(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	exceeded := func(t *testing.T, err error) string {
		t.Helper()
		var e *ratelimit.ExceededError
		if !errors.As(err, &e) {
			t.Fatalf("err = %v, want an *ExceededError", err)
		}
		return e.Error()
	}
	invalid := func(t *testing.T, err error) string {
		t.Helper()
		var e *ratelimit.ValidationError
		if !errors.As(err, &e) {
			t.Fatalf("err = %v, want a *ValidationError", err)
		}
		return e.Error()
	}
	messages := map[string]func(t *testing.T, typ, key string) string{
		"window too big": func(t *testing.T, typ, key string) string {
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window(typ, key, "requests", 1, 2)})
			return exceeded(t, err)
		},
		"window full": func(t *testing.T, typ, key string) string {
			lim := window(typ, key, "requests", 1, 1)
			lim.Window = 7 * 24 * time.Hour // both Reserves in one window (a minute's once ended between them)
			if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim}); err != nil {
				t.Fatalf("first Reserve: %v", err)
			}
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
			return exceeded(t, err)
		},
		"concurrent too big": func(t *testing.T, typ, key string) string {
			lim := concurrent(typ, key, 1)
			lim.Amount = 2
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
			return exceeded(t, err)
		},
		"concurrent full": func(t *testing.T, typ, key string) string {
			lim := concurrent(typ, key, 1)
			if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim}); err != nil {
				t.Fatalf("first Reserve: %v", err)
			}
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
			return exceeded(t, err)
		},
		"queue admits none": func(t *testing.T, typ, key string) string {
			q := queueLimit(key, 0)
			q.Scope.Type = typ
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{q}})
			return exceeded(t, err)
		},
		"queue full": func(t *testing.T, typ, key string) string {
			q := queueLimit(key, 1)
			q.Scope.Type = typ
			spec := ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{q}}
			if _, err := l.CreateTask(ctx, spec); err != nil {
				t.Fatalf("first CreateTask: %v", err)
			}
			_, err := l.CreateTask(ctx, spec)
			return exceeded(t, err)
		},
		"duplicate limit": func(t *testing.T, typ, key string) string {
			lim := window(typ, key, "requests", 1, 1)
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim, lim})
			return invalid(t, err)
		},
		"duplicate queue limit": func(t *testing.T, typ, key string) string {
			q := queueLimit(key, 1)
			q.Scope.Type = typ
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{q, q}})
			return invalid(t, err)
		},
	}
	for name, message := range messages {
		t.Run(name, func(t *testing.T) {
			id := strings.ReplaceAll(name, " ", "-")
			colonType := message(t, "tier:gold", "c-"+id)
			colonKey := message(t, "tier", "gold:c-"+id)
			if strings.ReplaceAll(colonType, `\"`, `"`) == strings.ReplaceAll(colonKey, `\"`, `"`) ||
				!strings.Contains(strings.ReplaceAll(colonType, `\"`, `"`), `"tier:gold":c-`) {
				t.Errorf("type tier:gold key c: %q\ntype tier key gold:c: %q\nwant them apart, the type quoted", colonType, colonKey)
			}
			if !strings.Contains(colonKey, "tier:gold:c-") {
				t.Errorf("type tier key gold:c: %q, want tier:gold:c-… as it was", colonKey)
			}
			spaced := message(t, "api_key", "team a\n"+id)
			if strings.Contains(spaced, "\n") || !strings.Contains(spaced, `api_key:`+`"team a\n`) && !strings.Contains(spaced, `api_key:\"team a\\n`) {
				t.Errorf("key %q: %q, want it Go-quoted on one line", "team a\n"+id, spaced)
			}
		})
	}
}

// A plain scope is shown exactly as before textcell.Scope shows it.
func TestPlainScopeInMessagesAsBefore(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", "abc", "requests", 1, 2)})
	if want := "rate limit exceeded: requests amount 2 is greater than limit 1 on api_key:abc"; err == nil || err.Error() != want {
		t.Errorf("Reserve: %v, want %s", err, want)
	}
	lim := window("api_key", "abc", "tokens", 5, 1)
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{lim, lim})
	if want := `ratelimit: invalid Limits[1] ("api_key:abc tokens"): same scope, metric and window as Limits[0]`; err == nil || err.Error() != want {
		t.Errorf("Reserve of a duplicate: %v, want %s", err, want)
	}
	q := queueLimit("abc", 1)
	_, err = l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{q, q}})
	if want := `ratelimit: invalid QueueLimits[1] ("queue:abc"): same queue scope as QueueLimits[0]`; err == nil || err.Error() != want {
		t.Errorf("CreateTask of a duplicate: %v, want %s", err, want)
	}
}

// The messages of a refusal show a window limit's metric as they show its
// scope (textcell.Show): a metric with a space or a newline was printed
// raw, so "cost usd" read as a metric "cost" followed by a word, and a
// newline split the caller's log line. A plain metric reads as before.
func TestMetricInMessagesIsUnambiguous(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	const metric = "cost usd\nx"
	refusal := func(t *testing.T, lim ratelimit.Limit) string {
		t.Helper()
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
		var e *ratelimit.ExceededError
		if !errors.As(err, &e) {
			t.Fatalf("Reserve: %v, want an *ExceededError", err)
		}
		return e.Error()
	}
	tooBig := refusal(t, window("api_key", uniqueKey("k"), metric, 1, 2))
	// Windows of an hour (or a few minutes more) with a minute left: each
	// refusal must meet the window its first Reserve filled (a minute's
	// could end between them).
	full := hourLimits(t, pool, window("api_key", uniqueKey("k"), metric, 1, 1))[0]
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{full}); err != nil {
		t.Fatalf("first Reserve: %v", err)
	}
	for name, got := range map[string]string{"amount too big": tooBig, "window full": refusal(t, full)} {
		if strings.Contains(got, "\n") || !strings.HasPrefix(got, `rate limit exceeded: "cost usd\nx" `) {
			t.Errorf("%s: %q, want the metric Go-quoted on one line", name, got)
		}
	}
	plain := hourLimits(t, pool, window("api_key", uniqueKey("k"), "tokens", 1, 1))[0]
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{plain}); err != nil {
		t.Fatalf("first Reserve: %v", err)
	}
	want := "rate limit exceeded: tokens window of " + plain.Scope.Type + ":" + plain.Scope.Key + " has 0 of 1 left, 1 needed; retry after "
	if got := refusal(t, plain); !strings.HasPrefix(got, want) {
		t.Errorf("plain metric: %q, want it to begin %q as before", got, want)
	}
}
