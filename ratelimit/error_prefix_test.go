package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// An error that wraps one of the package's sentinels names the package once:
// the wrapper's "ratelimit: get task <id>: " was followed by the sentinel's
// own "ratelimit: unknown task or attempt", so the message read
// "ratelimit: get task <id>: ratelimit: unknown task or attempt". The
// sentinel still matches with errors.Is.
func TestWrappedSentinelsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool)
	const ghost = "00000000-0000-4000-8000-000000000000"
	const token = "00000000-0000-4000-8000-000000000001"
	key := uniqueKey("prefix")

	cases := []struct {
		name     string
		call     func() error
		sentinel error
		want     string // the whole message; "" checks only that it names the package once
	}{
		{"GetTask", func() error { _, err := l.GetTask(ctx, ghost); return err },
			ratelimit.ErrUnknownTask, "ratelimit: get task " + ghost + ": unknown task or attempt"},
		{"TaskEvents", func() error { _, err := l.TaskEvents(ctx, ghost); return err },
			ratelimit.ErrUnknownTask, ""},
		{"TaskAttempts", func() error { _, err := l.TaskAttempts(ctx, ghost); return err },
			ratelimit.ErrUnknownTask, ""},
		{"HeartbeatTask", func() error { _, err := l.HeartbeatTask(ctx, ghost, token, time.Minute); return err },
			ratelimit.ErrUnknownTask, "ratelimit: heartbeat task " + ghost + ": unknown task or attempt"},
		{"FinishTask", func() error {
			_, err := l.FinishTask(ctx, ghost, token, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			return err
		}, ratelimit.ErrUnknownTask, "ratelimit: finish task " + ghost + ": unknown task or attempt"},
		{"CancelTask", func() error { _, err := l.CancelTask(ctx, ghost, "test"); return err },
			ratelimit.ErrUnknownTask, "ratelimit: cancel task " + ghost + ": unknown task or attempt"},
		{"AppendEvent", func() error {
			_, err := l.AppendEvent(ctx, ghost, token, ratelimit.Event{Type: "test"})
			return err
		}, ratelimit.ErrUnknownTask, "ratelimit: append event to task " + ghost + ": unknown task or attempt"},
		{"Reserve", func() error {
			_, err := l.Reserve(ctx, ghost, "", []ratelimit.Limit{window("api_key", key, "requests", 10, 1)})
			return err
		}, ratelimit.ErrUnknownTask, ""},
		{"Attach", func() error {
			grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", key, 10)})
			if err != nil {
				return err
			}
			defer func() { _, _ = l.Release(ctx, grant, "test") }()
			_, err = l.Attach(ctx, ghost, grant)
			return err
		}, ratelimit.ErrUnknownTask, "ratelimit: attach: attempt " + ghost + ": unknown task or attempt"},
		{"FinishTask REPEATABLE READ", func() error {
			task := startSync(t, l, time.Minute)
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = l.WithTx(tx).FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			return err
		}, ratelimit.ErrIsolation, "ratelimit: finish task: " + strings.TrimPrefix(ratelimit.ErrIsolation.Error(), "ratelimit: ")},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, c.sentinel) {
			t.Errorf("%s: %v; want an error matching %v", c.name, err, c.sentinel)
			continue
		}
		msg := err.Error()
		if n := strings.Count(msg, "ratelimit: "); n != 1 || !strings.HasPrefix(msg, "ratelimit: ") {
			t.Errorf("%s: %q names the package %d times; want once, first", c.name, msg, n)
		}
		if c.want != "" && msg != c.want {
			t.Errorf("%s: %q, want %q", c.name, msg, c.want)
		}
	}
}
