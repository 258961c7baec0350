package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// FuzzReserveInput feeds arbitrary limits to Reserve, and an arbitrary
// actual amount to Commit, on a real database. Whatever validation lets
// through, PostgreSQL must accept: the only errors allowed are a
// *ValidationError or a refusal, an admission grants exactly what was
// asked, and a valid commit records the actual amount.
func FuzzReserveInput(f *testing.F) {
	f.Add("api_key", "k1", "tokens", 100.0, 10.0, int64(60), int64(0), 420.0)
	f.Add("model", "m", "concurrent", 5.0, 1.0, int64(0), int64(120), 0.0)
	f.Add("", "k", "requests", 1.0, 1.0, int64(0), int64(0), 1.0)
	f.Add("a", "\x00", "r", math.NaN(), math.Inf(1), int64(-1), int64(-1), math.NaN())
	f.Add("a", "b", "queue_size", 1.0, 1.0, int64(1), int64(1), -1.0)
	f.Add("é", "ключ", "cost", 1e300, 1e-300, int64(31622400), int64(86400), 1.7e308)
	pool := pgtest.NewPool(f)
	l := ratelimit.New(pool)
	f.Fuzz(func(t *testing.T, scopeType, key, metric string, limit, amount float64, windowSeconds, ttlSeconds int64, actual float64) {
		lim := ratelimit.Limit{
			Scope:    ratelimit.Scope{Type: scopeType, Key: key},
			Metric:   metric,
			Limit:    limit,
			Amount:   amount,
			Window:   time.Duration(windowSeconds) * time.Second,
			LeaseTTL: time.Duration(ttlSeconds) * time.Second,
		}
		grant, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{lim})
		if errors.Is(err, ratelimit.ErrInvalidInput) || errors.Is(err, ratelimit.ErrExceeded) {
			return
		}
		if err != nil {
			t.Fatalf("Reserve(%+v): unexpected error %v", lim, err)
		}
		want := 0
		if amount > 0 {
			want = 1
		}
		if got := len(grant.Reservations) + len(grant.Leases); got != want {
			t.Fatalf("Reserve(%+v) granted %d, want %d", lim, got, want)
		}
		s, err := l.Commit(context.Background(), grant, map[string]float64{metric: actual})
		if errors.Is(err, ratelimit.ErrInvalidInput) {
			if _, err := l.Release(context.Background(), grant, "fuzz"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Commit(%v): unexpected error %v", actual, err)
		}
		for _, r := range s.Reservations {
			if !r.Settled || r.Actual != actual {
				t.Fatalf("Commit(%v) = %+v, want it settled with that actual amount", actual, r)
			}
		}
	})
}
