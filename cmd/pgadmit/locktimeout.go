package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// operatorLockTimeout bounds how long inspect and doctor wait for a lock on a table they read
// (PostgreSQL's lock_timeout, set for their own transaction only, so that it is safe behind
// PgBouncer in transaction mode): a long migration holds the tables it alters ACCESS EXCLUSIVE,
// and a reader that waits behind it would hang, and hold up every statement queued after it.
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
