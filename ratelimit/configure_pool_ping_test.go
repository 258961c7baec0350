package ratelimit_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// ConfigurePool's ShouldPing keeps pgxpool's idle rule when none was set,
// and keeps the caller's instead when one was: either asking for a ping is
// enough. (A connection whose socket has something to read is pinged too:
// TestConfiguredPoolReplacesSessionsTheServerEndedWithinASecond.)
func TestConfigurePoolKeepsTheShouldPingItFinds(t *testing.T) {
	t.Parallel()
	parsed := func(shouldPing func(context.Context, pgxpool.ShouldPingParams) bool) *pgxpool.Config {
		cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ShouldPing = shouldPing
		ratelimit.ConfigurePool(cfg)
		if cfg.ShouldPing == nil {
			t.Fatal("ConfigurePool set no ShouldPing")
		}
		return cfg
	}
	always := func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	never := func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	for _, c := range []struct {
		name       string
		shouldPing func(context.Context, pgxpool.ShouldPingParams) bool
		idle       time.Duration
		want       bool
	}{
		{"none set, used just now", nil, time.Millisecond, false},
		{"none set, idle over a second", nil, 1001 * time.Millisecond, true},
		{"always", always, time.Millisecond, true},
		{"never, idle over a second", never, time.Minute, false},
	} {
		cfg := parsed(c.shouldPing)
		// No connection: nothing to peek at, the rule alone decides.
		if got := cfg.ShouldPing(context.Background(), pgxpool.ShouldPingParams{IdleDuration: c.idle}); got != c.want {
			t.Errorf("%s: ShouldPing = %v, want %v", c.name, got, c.want)
		}
	}
}
