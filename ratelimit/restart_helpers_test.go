package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// restartOnNextAcquire makes cfg's pool play a server restart: once the
// returned flag is set, the next connection taken from the pool finds
// every session that the pool opened terminated and gone, so that the
// statement it was taken for fails. It is done as the connection is
// taken (PrepareConn), not as one is given back (AfterRelease, which
// pgxpool runs in a goroutine of its own), so no statement can take a
// still-live connection first.
func restartOnNextAcquire(t *testing.T, admin *pgxpool.Pool, cfg *pgxpool.Config) *atomic.Bool {
	t.Helper()
	app := uniqueKey("restart")
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	var pids sync.Map
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pids.Store(c.PgConn().PID(), true)
		return nil
	}
	var restart atomic.Bool
	cfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) {
		if restart.CompareAndSwap(true, false) {
			pids.Range(func(pid, _ any) bool {
				if _, err := testq.OpsTerminateBackend(context.Background(), admin, int32(pid.(uint32))); err != nil {
					t.Errorf("terminating session %v: %v", pid, err)
				}
				return true
			})
			awaitNoSessions(t, admin, app)
		}
		return true, nil
	}
	return &restart
}

// awaitNoSessions waits until no session named app is connected: the
// terminated (or killed) backends have exited, so a statement sent on any
// of their connections fails. It reports whether they did, and fails t with
// Errorf (it may run off the test's goroutine: restartOnNextAcquire's
// PrepareConn) when they are still there after 30 s.
func awaitNoSessions(t *testing.T, admin *pgxpool.Pool, app string) bool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		n, err := testq.OpsBackendCountByApplication(context.Background(), admin, app)
		if err != nil {
			t.Errorf("counting the sessions of %s: %v", app, err)
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%d terminated session(s) of %s still connected after 30s", n, app)
			return false
		}
	}
}
