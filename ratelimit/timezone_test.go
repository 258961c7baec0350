package ratelimit_test

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Windows are aligned to the Unix epoch, leases run whole seconds and
// every time pgadmit reads comes back, whatever the role's TimeZone and
// DateStyle: here Asia/Kathmandu (+05:45) and German (05.12.2026 18:45:00
// +0545), set on the role as a DBA would, or America/St_Johns (-03:30, with
// daylight saving time) set by the client. In each exec mode of a pool set
// up with ConfigurePool, those that read results as text (exec, which the
// README advises behind a transaction pooler, and simple_protocol)
// included: pgx reads a time in text only in the ISO style, and every
// Reserve failed with a raw scan error ("invalid PostgreSQL date/time
// value"); and on a pool without it whose connection string asks for ISO. A window of a day and one of seven hours (which does not divide
// a day) start at a multiple of their length since the epoch and end one
// length later, and a refusal's RetryAfter is at most the time left in the
// window; tasks, leases, Local blocks and the maintenance calls work too.
func TestWindowsAndLeasesIgnoreTheSessionsTimeZone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, zone string // zone: set by the client; "" leaves the role's Asia/Kathmandu
		mode       pgx.QueryExecMode
		dsn        string // added to the connection string, for a pool set up without ConfigurePool
	}{
		{"kathmandu_cache_statement", "", pgx.QueryExecModeCacheStatement, ""},
		{"kathmandu_exec", "", pgx.QueryExecModeExec, ""},
		{"kathmandu_simple_protocol", "", pgx.QueryExecModeSimpleProtocol, ""},
		{"st_johns_exec", "America/St_Johns", pgx.QueryExecModeExec, ""},
		{"kathmandu_exec_iso_in_url", "", pgx.QueryExecModeExec, "&datestyle=ISO"}, // as the README says
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := pgtest.NewURL(t)
			setup := pgtest.OpenPool(t, dsn)
			if err := testq.OpsSetMyTimeZoneAndDateStyle(ctx, setup); err != nil {
				t.Fatal(err)
			}
			setup.Close()
			cfg, err := pgxpool.ParseConfig(dsn + tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if tc.zone != "" {
				cfg.ConnConfig.RuntimeParams["timezone"] = tc.zone
			}
			cfg.ConnConfig.DefaultQueryExecMode = tc.mode
			if tc.dsn == "" {
				ratelimit.ConfigurePool(cfg)
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			want := cmp.Or(tc.zone, "Asia/Kathmandu")
			if got, err := testq.OpsSessionClockSettings(ctx, pool); err != nil || got.TimeZone != want || !strings.HasPrefix(got.DateStyle, "ISO,") {
				t.Fatalf("session settings %+v, %v; want TimeZone %s, DateStyle ISO", got, err, want)
			}
			l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
			t.Cleanup(l.Close)

			key := uniqueKey("tz")
			for _, w := range []time.Duration{24 * time.Hour, 7 * time.Hour} {
				lim := window("api_key", key, ratelimit.MetricRequests, 3, 2)
				lim.Window = w
				g := reserveAwayFromWindowEnd(ctx, t, l, lim)
				r := g.Reservations[0]
				if r.WindowStart.UnixNano()%int64(w) != 0 || r.ResetAt.Sub(r.WindowStart) != w {
					t.Errorf("window %v: [%v, %v), want one starting at a multiple of %v since the epoch", w, r.WindowStart.UTC(), r.ResetAt.UTC(), w)
				}
				if g.DecidedAt.Before(r.WindowStart) || !g.DecidedAt.Before(r.ResetAt) {
					t.Errorf("window %v: decided at %v, outside its window [%v, %v)", w, g.DecidedAt.UTC(), r.WindowStart.UTC(), r.ResetAt.UTC())
				}
				_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
				var ex *ratelimit.ExceededError
				if !errors.As(err, &ex) || !ex.Retryable {
					t.Fatalf("second Reserve (window %v): %v, want a retryable refusal", w, err)
				}
				if !ex.ResetAt.Equal(r.ResetAt) || ex.RetryAfter <= 0 || ex.RetryAfter > r.ResetAt.Sub(g.DecidedAt) {
					t.Errorf("window %v: refusal resets at %v after %v; want %v, at most %v", w, ex.ResetAt.UTC(), ex.RetryAfter, r.ResetAt.UTC(), r.ResetAt.Sub(g.DecidedAt))
				}
				if err := l.Check(ctx, []ratelimit.Limit{lim}); !errors.As(err, &ex) || !ex.ResetAt.Equal(r.ResetAt) {
					t.Errorf("Check (window %v): %v, want a refusal resetting at %v", w, err, r.ResetAt.UTC())
				}
				if _, err := l.Commit(ctx, g, nil); err != nil {
					t.Fatalf("Commit: %v", err)
				}
			}

			c := concurrent("model", key, 1)
			c.LeaseTTL = 30 * time.Second
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{c})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Leases[0].ExpiresAt.Sub(g.DecidedAt); got < c.LeaseTTL || got > c.LeaseTTL+5*time.Second {
				t.Errorf("lease of TTL %v expires %v after the decision", c.LeaseTTL, got)
			}
			renewed, err := l.RenewLeases(ctx, g.Leases)
			if err != nil || !renewed[0].ExpiresAt.After(g.Leases[0].ExpiresAt.Add(-time.Second)) {
				t.Errorf("RenewLeases: %v, %v", renewed, err)
			}
			if _, err := l.Release(ctx, g, "done"); err != nil {
				t.Fatal(err)
			}

			local := window("api_key", key, ratelimit.MetricTokens, 1000, 1)
			local.Local = true
			local.Window = 7 * time.Hour
			lg, err := l.Reserve(ctx, "", "", []ratelimit.Limit{local})
			if err != nil {
				t.Fatal(err)
			}
			if r := lg.Reservations[0]; !r.Local || r.WindowStart.UnixNano()%int64(local.Window) != 0 {
				t.Errorf("Local reservation %+v: want one from a block of the epoch-aligned window", r)
			}
			if _, err := l.Commit(ctx, lg, nil); err != nil {
				t.Fatal(err)
			}

			task := startSync(t, l, time.Minute)
			if got := task.LeaseExpiresAt.Sub(task.CreatedAt); got < time.Minute || got > time.Minute+5*time.Second {
				t.Errorf("sync task's lease of 1m expires %v after its creation", got)
			}
			until, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
			if err != nil || until.Before(task.LeaseExpiresAt) {
				t.Errorf("HeartbeatTask: %v, %v; want at least %v", until, err, task.LeaseExpiresAt)
			}
			if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
				t.Fatal(err)
			}
			l.Close()

			m := ratelimit.NewMaintenance(pool)
			if _, err := m.Recover(ctx); err != nil {
				t.Errorf("Recover: %v", err)
			}
			if _, err := m.Prune(ctx, time.Hour); err != nil {
				t.Errorf("Prune: %v", err)
			}
			if report, err := m.Doctor(ctx); err != nil || !report.OK() {
				t.Errorf("Doctor: %v, %v", report, err)
			}
		})
	}
}

// ConfigurePool keeps a DateStyle the caller set, whatever the case of its
// name, and sets ISO otherwise.
func TestConfigurePoolKeepsTheCallersDateStyle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		params map[string]string
		want   map[string]string
	}{
		{map[string]string{}, map[string]string{"datestyle": "ISO"}},
		{map[string]string{"DateStyle": "ISO, DMY"}, map[string]string{"DateStyle": "ISO, DMY"}},
		{map[string]string{"datestyle": "ISO, YMD", "timezone": "UTC"}, map[string]string{"datestyle": "ISO, YMD", "timezone": "UTC"}},
	} {
		cfg, err := pgxpool.ParseConfig("postgres://localhost/x")
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams = tc.params
		ratelimit.ConfigurePool(cfg)
		if diff := gocmp.Diff(tc.want, cfg.ConnConfig.RuntimeParams); diff != "" {
			t.Errorf("RuntimeParams after ConfigurePool (-want +got):\n%s", diff)
		}
	}
}

// reserveAwayFromWindowEnd reserves lim where at least two seconds of its
// window are left, so that a second Reserve is refused in the same window
// with a RetryAfter (at least 1s) within the time left. A grant taken
// closer to the window's end (a CI run near midnight UTC met a day's
// window with 0.4 s left) is released and taken again in the next window.
func reserveAwayFromWindowEnd(ctx context.Context, t *testing.T, l *ratelimit.Limiter, lim ratelimit.Limit) ratelimit.Grant {
	t.Helper()
	for {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
		if err != nil {
			t.Fatalf("Reserve (window %v): %v", lim.Window, err)
		}
		r := g.Reservations[0]
		left := r.ResetAt.Sub(g.DecidedAt)
		if left >= 2*time.Second {
			return g
		}
		if _, err := l.Release(ctx, g, "too near the window's end"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		time.Sleep(left + 100*time.Millisecond)
	}
}
