package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// LockWaiters returns the process ids of the sessions of pool's database that wait for a
// heavyweight lock now, and fails t when it cannot read them.
func LockWaiters(t testing.TB, pool *pgxpool.Pool) []int32 {
	t.Helper()
	waiting, err := dbtest.New().OpsBackendsWaitingOnLock(context.Background(), pool)
	if err != nil {
		t.Fatalf("OpsBackendsWaitingOnLock: %v", err)
	}
	return waiting
}

// LockRequesters returns the process ids of the sessions of pool's database that requested a
// heavyweight lock and were not granted it, as the lock table shows them: unlike LockWaiters,
// it counts a waiter also while it runs its deadlock check (see AwaitNoLockWaiters).
func LockRequesters(t testing.TB, pool *pgxpool.Pool) []int32 {
	t.Helper()
	waiting, err := dbtest.New().OpsBackendsAwaitingLock(context.Background(), pool)
	if err != nil {
		t.Fatalf("OpsBackendsAwaitingLock: %v", err)
	}
	return waiting
}

// AwaitLockWaiters waits until some session of pool's database waits for a heavyweight lock
// (a row, a transaction, an advisory lock), so that a test can act while a statement is blocked
// mid-flight, and returns their process ids. It fails t, naming what, when none does within 20
// seconds.
func AwaitLockWaiters(t testing.TB, pool *pgxpool.Pool, what string) []int32 {
	t.Helper()
	return AwaitLockWaiterCount(t, pool, 1, what)
}

// AwaitLockWaiterCount is AwaitLockWaiters until at least n sessions wait for a lock.
func AwaitLockWaiterCount(t testing.TB, pool *pgxpool.Pool, n int, what string) []int32 {
	t.Helper()
	return awaitWaiters(t, what, n, func() []int32 { return LockWaiters(t, pool) })
}

// AwaitLockWaitersOn is AwaitLockWaiters for a wait on one table (named as the search_path
// finds it): right after a statement waited on another lock, a wait on any lock may still be
// that one's.
func AwaitLockWaitersOn(t testing.TB, pool *pgxpool.Pool, table, what string) []int32 {
	t.Helper()
	return awaitWaiters(t, what, 1, func() []int32 {
		waiting, err := dbtest.New().OpsBackendsWaitingOnTable(context.Background(), pool, table)
		if err != nil {
			t.Fatalf("OpsBackendsWaitingOnTable: %v", err)
		}
		return waiting
	})
}

// awaitWaiters polls waiters until it returns at least n, and fails t, naming what (and, for
// n > 1, how many did wait), when it has returned fewer for 20 seconds.
func awaitWaiters(t testing.TB, what string, n int, waiters func() []int32) []int32 {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		waiting := waiters()
		if len(waiting) >= n {
			return waiting
		}
		if time.Now().After(deadline) {
			if n > 1 {
				t.Fatalf("%s never waited for a lock (%d waiting, want at least %d)", what, len(waiting), n)
			}
			t.Fatalf("%s never waited for a lock", what)
		}
	}
}

// AwaitNoLockWaiters waits until no backend of pool's database waits for a lock, and fails
// the test after 5 s. A statement whose client gave up is cancelled on the server by a cancel
// request that pgx sends after it closed the connection, on a connection of its own: until it
// lands, the statement still waits for its lock, and releasing the lock would let it commit.
// It reads the lock table (LockRequesters), not the wait event LockWaiters reads: a waiter
// clears its wait event while it runs its deadlock check, deadlock_timeout (1 s) into its
// wait, and a cancel that lands late (a loaded machine) left that moment in the polls, where a
// poll saw no waiter and the test let the statement commit.
func AwaitNoLockWaiters(t testing.TB, pool *pgxpool.Pool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		waiting := LockRequesters(t, pool)
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still waits for a lock: it was not cancelled on the server", what)
		}
	}
}
