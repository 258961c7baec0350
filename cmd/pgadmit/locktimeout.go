package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// operatorLockTimeout bounds how long inspect and doctor wait for a lock on a table they read
// (PostgreSQL's lock_timeout, set for their own transaction only, so that it is safe behind
// PgBouncer in transaction mode): a long migration holds the tables it alters ACCESS EXCLUSIVE,
// and a reader that waits behind it would hang, and hold up every statement queued after it.
// It also bounds each wait for a lock of a batch of recover and prune (WithMaintenanceLockTimeout;
// lock_timeout applies to each lock waited for, so a batch that waits for several in turn can take
// several times this): a transaction left idle with a counter row locked would hang them, and
// every later pass of a sweeper.
const operatorLockTimeout = 5 * time.Second

// lockTimeoutError is a command's failure when a table it reads stayed locked by another session
// for longer than operatorLockTimeout (SQLSTATE 55P03, lock_not_available).
type lockTimeoutError struct{ err error }

func (e *lockTimeoutError) Error() string {
	return fmt.Sprintf("a table it reads is locked by another session (a migration?): gave up after %s; try again later (%v)", operatorLockTimeout, e.err)
}

func (e *lockTimeoutError) Unwrap() error { return e.err }

// lockTimedOut returns err as a *lockTimeoutError when the server gave up waiting for a lock;
// other errors pass through unchanged.
func lockTimedOut(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return &lockTimeoutError{err: err}
	}
	return err
}

// lockWaitError is a recover or prune run's failure when rows (or a table) it had to lock stayed
// locked by another session for longer than operatorLockTimeout: it left them (and, after a
// second such wait in a step, the rest of that step; the wrapped error says which), its counts
// say what it did, and a later run takes what it left once that session lets go.
type lockWaitError struct{ err error }

func (e *lockWaitError) Error() string {
	return fmt.Sprintf("another session held locks it needed (a transaction left idle in transaction, a migration?): gave up on them after %s and left what it could not lock (what it did is counted); run it again once that session lets go (%v)", operatorLockTimeout, e.err)
}

func (e *lockWaitError) Unwrap() error { return e.err }

// lockWaited returns err as a *lockWaitError when the run's every error is a step that gave up
// waiting for a lock (a *ratelimit.LockWaitError); other errors pass through unchanged: a run
// also cut off (its deadline, the connection lost) or rejected is told by its own errors, which
// name the lock waits too.
func lockWaited(err error) error {
	if err != nil && ratelimit.OnlyLockWaits(err) {
		return &lockWaitError{err: err}
	}
	return err
}
