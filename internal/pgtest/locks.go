package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// AwaitLockWaiters waits until some session of pool's database waits for a heavyweight lock
// (a row, a transaction, an advisory lock), so that a test can act while a statement is blocked
// mid-flight, and returns their process ids. It fails t, naming what, when none does within 20
// seconds.
func AwaitLockWaiters(t testing.TB, pool *pgxpool.Pool, what string) []int32 {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		waiting, err := dbtest.New().OpsBackendsWaitingOnLock(context.Background(), pool)
		if err != nil {
			t.Fatalf("OpsBackendsWaitingOnLock: %v", err)
		}
		if len(waiting) > 0 {
			return waiting
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited for a lock", what)
		}
	}
}
