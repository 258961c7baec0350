package ratelimit

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/locktimeout"
)

// A *LockWaitError's Bound is the lock_timeout its statements ran with, which the server gave up
// after: the bound as lock_timeout is set to it, rounded up to a whole millisecond and capped at
// lock_timeout's range (locktimeout.Millis), as pgadmit's errors name it. It was the bound as
// given: 1.5ms for a wait of 2ms, 1000h for one of 596h31m23.647s.
func TestLockWaitBoundIsTheLockTimeoutSet(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	for _, c := range []struct{ bound, want time.Duration }{
		{0, 0}, // none of pgadmit's: the server's own gave up
		{time.Nanosecond, time.Millisecond},
		{999 * time.Microsecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{4 * time.Second, 4 * time.Second},
		{locktimeout.Max, locktimeout.Max},
		{locktimeout.Max + time.Nanosecond, locktimeout.Max},
		{1000 * time.Hour, locktimeout.Max},
	} {
		for name, err := range map[string]error{
			"a step's single statement": timedOut,
			"a step's batches":          &LockWaitError{Rows: 1, Err: timedOut},
		} {
			var lw *LockWaitError
			if !errors.As(lockWait("recover", "reclaim expired tasks", c.bound, err), &lw) {
				t.Fatalf("%s, bound %s: no *LockWaitError", name, c.bound)
			}
			if lw.Bound != c.want {
				t.Errorf("%s, bound %s: LockWaitError.Bound = %s, want %s", name, c.bound, lw.Bound, c.want)
			}
		}
	}
}
