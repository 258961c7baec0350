package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A *ratelimit.LockWaitError says the bound it gave up after (its Bound); recover's and prune's
// message around it says which flag set it, but names the duration once: it read "gave up on
// them after 300ms (--lock-timeout) ... (... past the lock timeout (300ms): ...)".
func TestLockWaitSaysItsBoundOnce(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	step := func(job, step string, bound time.Duration) error {
		return &ratelimit.LockWaitError{Job: job, Step: step, Bound: bound, Rest: true, Err: timedOut} // it names its job and step
	}
	for _, tc := range []struct {
		err      error
		bound    time.Duration // --lock-timeout
		duration string        // said once
		says     []string
	}{
		{step("prune", "counters", 300*time.Millisecond), 300 * time.Millisecond, "300ms",
			[]string{"gave up on them at --lock-timeout and left what it could not lock"}},
		{step("recover", "take the recover lease", 4*time.Second), 5 * time.Second, "4s",
			[]string{"gave up on them at the bound of a run's lease (less than --lock-timeout 5s) and did nothing"}},
		{errors.Join(step("recover", "reclaim expired tasks", 5*time.Second), step("recover", "release the recover lease", 4*time.Second)), 5 * time.Second, "4s",
			[]string{"gave up on them at --lock-timeout, and on its lease at the bound of a run's lease (less than --lock-timeout 5s)"}},
		{step("recover", "reclaim expired tasks", 0), 0, "", []string{"gave up on them after the server's own lock_timeout (--lock-timeout 0 sets none)"}},
	} {
		got := lockWaited(tc.err, tc.bound).Error()
		if tc.duration != "" && (strings.Count(got, "("+tc.duration+")") != 1 || strings.Contains(got, " "+tc.duration+" ")) {
			t.Errorf("--lock-timeout %s: %q does not say %s once", tc.bound, got, tc.duration)
		}
		for _, s := range tc.says {
			if !strings.Contains(got, s) {
				t.Errorf("--lock-timeout %s: %q does not say %q", tc.bound, got, s)
			}
		}
	}
}
