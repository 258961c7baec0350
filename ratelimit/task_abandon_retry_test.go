package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// These tests make a caller of CreateTask or ClaimTask leave after the
// server committed its statement (heldAnswers), and every session under
// the pool is terminated (a restart, a failover) just before the task is
// cancelled or put back: each connection the pool holds fails its first
// statement. Cancelling and putting back are fenced, so idempotent, and
// nobody else knows the task: they are tried again until a fresh
// connection answers, and the task is left as it should be at once, not
// when Recover or a lease's end gets to it.

// restartingPool returns a pool on admin's database whose answers to
// statements naming key are held back (heldAnswers), and restart: once it
// is set, the next connection taken from the pool finds every session
// that the pool opened terminated, as after a server restart.
func restartingPool(t *testing.T, admin *pgxpool.Pool, key string) (*pgxpool.Pool, *heldAnswers, *atomic.Bool) {
	t.Helper()
	h := &heldAnswers{key: []byte(key), let: make(chan struct{})}
	t.Cleanup(h.release)
	cfg, err := pgxpool.ParseConfig(admin.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	const conns = 6
	cfg.MaxConns = conns
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: conn, h: h}, nil
	}
	restart := restartOnNextAcquire(t, admin, cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	held := make([]*pgxpool.Conn, conns) // open every connection the pool may have
	for i := range held {
		if held[i], err = pool.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		c.Release()
	}
	return pool, h, restart
}

func TestAbandonedClaimIsPutBackAfterTheSessionIsTerminated(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewPool(t)
	worker := uniqueKey("w")
	pool, answers, restart := restartingPool(t, admin, worker) // the worker id is in the claim's statement
	l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(time.Minute))
	createAsync(t, ratelimit.New(admin), queueLimit(uniqueKey("q"), 1))

	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := l.ClaimTask(ctx, worker, time.Hour); errs <- err }()
	awaitSummary(t, admin, "the task claimed", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksRunning == 1 })
	leave()
	restart.Store(true)
	answers.release()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("ClaimTask after its caller left: %v, want context.Canceled", err)
	}
	l.Close() // waits for the putting back, done in the background
	if restart.Load() {
		t.Fatal("the sessions were not terminated before the task was put back")
	}
	s := summary(t, admin)
	if s.TasksQueued != 1 || s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.Admissions != 1 {
		t.Errorf("after the claimer left: %d queued, %d running, %d attempts running, %d queue admissions; want the task queued with its place",
			s.TasksQueued, s.TasksRunning, s.AttemptsRunning, s.Admissions)
	}
}

func TestAbandonedTaskIsCancelledAfterTheSessionIsTerminated(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{true, false} {
		name := "sync"
		if async {
			name = "async"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			admin := pgtest.NewPool(t)
			key := uniqueKey("q")
			pool, answers, restart := restartingPool(t, admin, key) // the queue's key is in the statement
			l := ratelimit.New(pool, ratelimit.WithLeftStatementGrace(time.Minute))
			spec := ratelimit.TaskSpec{Async: async, Kind: "test", QueueLimits: []ratelimit.Limit{queueLimit(key, 1)}}
			if !async {
				spec.Worker, spec.LeaseTTL = "w-sync", time.Hour
			}

			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			go func() { _, err := l.CreateTask(ctx, spec); errs <- err }()
			awaitSummary(t, admin, "a task created", func(s dbtest.OpsStateSummaryRow) bool {
				return s.TasksQueued+s.TasksRunning == 1
			})
			leave()
			restart.Store(true)
			answers.release()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("CreateTask after its caller left: %v, want context.Canceled", err)
			}
			l.Close() // waits for the cancelling, done in the background
			if restart.Load() {
				t.Fatal("the sessions were not terminated before the task was cancelled")
			}
			s := summary(t, admin)
			if s.TasksQueued != 0 || s.TasksRunning != 0 || s.AttemptsRunning != 0 || s.Admissions != 0 || s.TasksCancelled != 1 {
				t.Errorf("after the caller left: %d queued, %d running, %d attempts running, %d queue admissions, %d cancelled; want only 1 cancelled",
					s.TasksQueued, s.TasksRunning, s.AttemptsRunning, s.Admissions, s.TasksCancelled)
			}
		})
	}
}
