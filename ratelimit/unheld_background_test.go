package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A caller who left after the server committed its statement gets its
// context's error as soon as the answer is read, while the database is
// down for the give-back of what the statement did for it (a grant
// released, a task cancelled or put back): the give-back goes on in the
// background, trying for its span, and Close returns only once its tries
// have ended. The call used to wait for the give-back, up to 2 s more,
// when it ran on the caller's goroutine (WithoutCombining, and the task
// calls).
func TestUnheldGiveBackDoesNotHoldACallerWhoLeft(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	for _, tc := range []struct {
		name    string
		opts    []ratelimit.Option
		prepare func(t *testing.T, admin *pgxpool.Pool)
		// call makes a call whose statement names key.
		call func(ctx context.Context, l *ratelimit.Limiter, key string) error
		// committed returns once the server committed the call's statement.
		committed func(t *testing.T, admin *pgxpool.Pool, key string)
	}{
		{
			name: "Reserve without combining",
			opts: []ratelimit.Option{ratelimit.WithoutCombining()},
			call: func(ctx context.Context, l *ratelimit.Limiter, key string) error {
				_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)})
				return err
			},
			committed: func(t *testing.T, admin *pgxpool.Pool, key string) { awaitOpen(t, admin, "key", key, 1) },
		},
		{
			name: "Reserve combined", // it left the caller's goroutine before; Close waits for it
			call: func(ctx context.Context, l *ratelimit.Limiter, key string) error {
				_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)})
				return err
			},
			committed: func(t *testing.T, admin *pgxpool.Pool, key string) { awaitOpen(t, admin, "key", key, 1) },
		},
		{
			name: "CreateTask",
			call: func(ctx context.Context, l *ratelimit.Limiter, key string) error {
				_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: []ratelimit.Limit{queueLimit(key, 1)}})
				return err
			},
			committed: func(t *testing.T, admin *pgxpool.Pool, _ string) {
				awaitSummary(t, admin, "the task created", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksQueued == 1 })
			},
		},
		{
			name: "ClaimTask",
			prepare: func(t *testing.T, admin *pgxpool.Pool) {
				createAsync(t, ratelimit.New(admin), queueLimit(uniqueKey("q"), 1))
			},
			call: func(ctx context.Context, l *ratelimit.Limiter, key string) error {
				_, err := l.ClaimTask(ctx, key, time.Hour) // the worker id is in the claim's statement
				return err
			},
			committed: func(t *testing.T, admin *pgxpool.Pool, _ string) {
				awaitSummary(t, admin, "the task claimed", func(s dbtest.OpsStateSummaryRow) bool { return s.TasksRunning == 1 })
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			admin := pgtest.NewPool(t)
			if tc.prepare != nil {
				tc.prepare(t, admin)
			}
			key := uniqueKey("k")
			pool, answers, down := downPool(t, admin, key)
			var mu sync.Mutex
			var tries []time.Time
			l := ratelimit.New(pool, append(tc.opts, ratelimit.WithLeftStatementGrace(time.Minute),
				ratelimit.WithUnheldTryHook(func() {
					mu.Lock()
					tries = append(tries, time.Now())
					mu.Unlock()
				}))...)
			triesNow := func() []time.Time {
				mu.Lock()
				defer mu.Unlock()
				return append([]time.Time(nil), tries...)
			}

			ctx, leave := context.WithCancel(bg)
			errs := make(chan error, 1)
			go func() { errs <- tc.call(ctx, l, key) }()
			tc.committed(t, admin, key) // its answer is held
			leave()
			down.Store(true)
			answered := time.Now()
			answers.release()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("the call after its caller left: %v, want context.Canceled", err)
			}
			// At once is a few ms; waiting for the give-back is its whole
			// span (2 s). The bound sits between them, far from both, so a
			// loaded CI machine does not fail a call that did not wait.
			if took := time.Since(answered); took > ratelimit.UnheldReleaseSpan/2 {
				t.Errorf("the call returned %v after its statement was answered, want at once (under %v): it waited for the give-back (%d tries)",
					took, ratelimit.UnheldReleaseSpan/2, len(triesNow()))
			}

			l.Close()
			closed := time.Now()
			got := triesNow()
			if len(got) < 2 {
				t.Fatalf("the give-back made %d tries with the database down, want it to try again", len(got))
			}
			// The tries go on past the span; a Close that did not wait
			// returns within ms of the first. Half the span tells them
			// apart without racing the give-back's own clock.
			if waited := closed.Sub(got[0]); waited < ratelimit.UnheldReleaseSpan/2 {
				t.Errorf("Close returned %v after the give-back's first try, well before its span (%v) ended: it did not wait for it", waited, ratelimit.UnheldReleaseSpan)
			}
			time.Sleep(50 * time.Millisecond)
			if after := len(triesNow()); after != len(got) {
				t.Errorf("%d tries after Close returned: the give-back outlived it", after-len(got))
			}
		})
	}
}

// downPool returns a pool on admin's database whose answers to statements
// naming key are held back (heldAnswers), and down: once it is set, the
// database is unreachable, as when it went down: every statement written
// on a connection the pool holds fails, and every new connection is
// refused (deadserver.Stop). An answer already on its way still comes.
func downPool(t *testing.T, admin *pgxpool.Pool, key string) (*pgxpool.Pool, *heldAnswers, *atomic.Bool) {
	t.Helper()
	h := &heldAnswers{key: []byte(key), let: make(chan struct{})}
	t.Cleanup(h.release)
	stoppedServer, err := deadserver.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stoppedServer.Close)
	stopped := stoppedServer.Addr()
	cfg, err := pgxpool.ParseConfig(admin.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	down := &atomic.Bool{}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			addr = stopped
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &downConn{Conn: &heldConn{Conn: conn, h: h}, down: down}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, h, down
}

// downConn fails every write once down is set, and closes the connection
// then, as a reset does: a read after it ends at once. (Left open, pgx's
// close of the connection, which reads it until the server hangs up, would
// wait out its 15 s deadline, for a server that never got the Terminate.)
type downConn struct {
	net.Conn
	down *atomic.Bool
}

func (c *downConn) Write(b []byte) (int, error) {
	if c.down.Load() {
		c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(b)
}
