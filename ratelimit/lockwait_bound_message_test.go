package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A *LockWaitError says how long the step waited for the lock before the server gave up
// (Bound), as the CLI's text does: someone reading a log line from a library caller had to
// know what WithMaintenanceLockTimeout was set to. With no bound of pgadmit's (0: the server's
// own gave up, or one made by hand) it names none.
func TestLockWaitErrorSaysItsBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  *ratelimit.LockWaitError
		want string
	}{
		{&ratelimit.LockWaitError{Job: "recover", Step: "reclaim expired tasks", Rows: 3, Bound: 2 * time.Second},
			"ratelimit: recover: reclaim expired tasks: left 3 rows: another transaction held a lock past the lock timeout (2s)"},
		{&ratelimit.LockWaitError{Job: "prune", Step: "take the prune lease", Bound: 1500 * time.Millisecond},
			"ratelimit: prune: take the prune lease: the run did nothing: another transaction held a lock past the lock timeout (1.5s)"},
		{&ratelimit.LockWaitError{Job: "prune", Step: "allotments", Bound: 90 * time.Minute},
			"ratelimit: prune: allotments: left the rest of the step: another transaction held a lock past the lock timeout (1h30m)"},
		{&ratelimit.LockWaitError{Job: "recover", Step: "reclaim expired tasks", Rows: 1},
			"ratelimit: recover: reclaim expired tasks: left 1 row: another transaction held a lock past the lock timeout"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Bound %s:\n got %q\nwant %q", c.err.Bound, got, c.want)
		}
		if c.err.Bound == 0 && strings.Contains(c.err.Error(), "(0s)") {
			t.Errorf("no bound of pgadmit's reads as a bound of 0s: %q", c.err.Error())
		}
	}
}
