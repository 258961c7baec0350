package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Inside one caller's transaction, operations run only in the global lock
// order; one that could deadlock with other transactions is refused before
// it runs.
func TestOperationsInOneTransactionFollowTheLockOrder(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key, model := uniqueKey("key"), uniqueKey("model")
	windowLimit := []ratelimit.Limit{window("api_key", key, "requests", 10, 1)}
	slot := []ratelimit.Limit{concurrent("model", model, 5)}

	queuedTask := ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "team", Key: key}, Metric: ratelimit.MetricQueueSize, Limit: 100},
	}}
	held, err := l.Reserve(ctx, "", "", append(windowLimit, slot...))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		first  func(*ratelimit.Limiter) error
		second func(*ratelimit.Limiter) error
		want   error
	}{
		{
			// The deadlock the review reproduced: a concurrency scope's
			// advisory lock, then a counter row.
			name:   "Reserve(concurrent) then Reserve(window)",
			first:  func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", slot); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", windowLimit); return err },
			want:   ratelimit.ErrLockOrder,
		},
		{
			name:   "Reserve then Commit",
			first:  func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", windowLimit); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.Commit(ctx, held, nil); return err },
			want:   ratelimit.ErrLockOrder,
		},
		{
			name:   "Reserve(window) then RenewLeases",
			first:  func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", windowLimit); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.RenewLeases(ctx, held.Leases); return err },
		},
		{
			name: "Reserve then ReleaseLeases",
			first: func(l *ratelimit.Limiter) error {
				_, err := l.Reserve(ctx, "", "", append(windowLimit, slot...))
				return err
			},
			second: func(l *ratelimit.Limiter) error { _, err := l.ReleaseLeases(ctx, held.Leases, "done"); return err },
		},
		{
			name: "Reserve then CreateTask with a queue limit",
			first: func(l *ratelimit.Limiter) error {
				_, err := l.Reserve(ctx, "", "", append(windowLimit, slot...))
				return err
			},
			second: func(l *ratelimit.Limiter) error { _, err := l.CreateTask(ctx, queuedTask); return err },
		},
		{
			name:   "CreateTask with a queue limit then Reserve",
			first:  func(l *ratelimit.Limiter) error { _, err := l.CreateTask(ctx, queuedTask); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", windowLimit); return err },
			want:   ratelimit.ErrLockOrder,
		},
		{
			name:   "CreateTask then ClaimTask",
			first:  func(l *ratelimit.Limiter) error { _, err := l.CreateTask(ctx, queuedTask); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.ClaimTask(ctx, "worker", 0); return err },
		},
		{
			name:   "ReleaseLeases then Reserve",
			first:  func(l *ratelimit.Limiter) error { _, err := l.ReleaseLeases(ctx, held.Leases, "done"); return err },
			second: func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", windowLimit); return err },
			want:   ratelimit.ErrLockOrder,
		},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inTx := l.WithTx(tx)
		if err := tc.first(inTx); err != nil {
			t.Fatalf("%s: first: %v", tc.name, err)
		}
		err = tc.second(inTx)
		var order *ratelimit.LockOrderError
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: second: %v, want success", tc.name, err)
		case tc.want != nil && (!errors.Is(err, tc.want) || !errors.As(err, &order)):
			t.Errorf("%s: second: err = %v, want *LockOrderError", tc.name, err)
		}
		_ = tx.Rollback(ctx)
	}
}
