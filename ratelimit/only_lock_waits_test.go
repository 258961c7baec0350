package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A run whose only trouble was rows left behind other sessions' locks is
// told apart from one that also failed otherwise, however its errors are
// joined and wrapped.
func TestOnlyLockWaits(t *testing.T) {
	t.Parallel()
	wait := func() error {
		return &ratelimit.LockWaitError{Job: "recover", Step: "s", Rows: 1, Err: &pgconn.PgError{Code: "55P03"}}
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"one", wait(), true},
		{"wrapped", fmt.Errorf("ratelimit: recover: s: %w", wait()), true},
		{"joined", errors.Join(wait(), fmt.Errorf("b: %w", wait())), true},
		{"joined in joined", errors.Join(errors.Join(wait()), wait()), true},
		{"empty join", fmt.Errorf("x: %w", errors.Join()), false},
		{"a bare 55P03", &pgconn.PgError{Code: "55P03"}, false},
		{"and cut off", errors.Join(wait(), context.DeadlineExceeded), false},
		{"and a lost connection", errors.Join(wait(), &pgconn.PgError{Code: "57P01"}), false},
		{"other", errors.New("boom"), false},
	} {
		if got := ratelimit.OnlyLockWaits(c.err); got != c.want {
			t.Errorf("%s: OnlyLockWaits(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
