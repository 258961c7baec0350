package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A run whose every error is a lock wait is told as one, with its advice
// to run again once the other session lets go; a run that also failed
// otherwise (cut off by its deadline, the connection lost) is told by its
// own errors: that advice would hide why it stopped.
func TestLockWaitedOnlyWhenEveryErrorIsALockWait(t *testing.T) {
	wait := func() error {
		return fmt.Errorf("ratelimit: recover: reclaim expired tasks: %w", &ratelimit.LockWaitError{
			Job: "recover", Step: "reclaim expired tasks", Rows: 1, Err: &pgconn.PgError{Code: "55P03"},
		})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"one lock wait", wait(), true},
		{"lock waits of two steps", errors.Join(wait(), wait()), true},
		{"a lock wait, then the deadline", errors.Join(fmt.Errorf("ratelimit: recover: x: %w", context.DeadlineExceeded), wait()), false},
		{"a lock wait and a rejected row", errors.Join(wait(), &pgconn.PgError{Code: "23514"}), false},
		{"no lock wait", context.DeadlineExceeded, false},
	} {
		var lw *lockWaitError
		if got := errors.As(lockWaited(tc.err), &lw); got != tc.want {
			t.Errorf("%s: told as a lock wait: %v, want %v", tc.name, got, tc.want)
		}
	}
}
