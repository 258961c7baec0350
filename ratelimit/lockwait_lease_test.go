package ratelimit_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A *LockWaitError of the take of a run's lease said the run "left the rest
// of the step", as one of a step's single statement does, though the run
// did nothing at all; one of the release said so too, though the run had
// done its work and left only its lease held. Each now says what happened,
// and LeaseTake and LeaseRelease tell them from a step's without rebuilding
// the step's name.
func TestLockWaitErrorOfTheLeaseSaysWhatTheRunDid(t *testing.T) {
	t.Parallel()
	timedOut := &pgconn.PgError{Code: "55P03"}
	const stepLeft = "left the rest of the step"
	for _, c := range []struct {
		err          *ratelimit.LockWaitError
		take, rel    bool
		says, denies string
	}{
		{&ratelimit.LockWaitError{Job: "recover", Step: "take the recover lease", Rest: true, Err: timedOut}, true, false, "take the recover lease: the run did nothing: another transaction", stepLeft},
		{&ratelimit.LockWaitError{Job: "prune", Step: "take the prune lease", Rest: true, Err: timedOut}, true, false, "take the prune lease: the run did nothing: another transaction", stepLeft},
		{&ratelimit.LockWaitError{Job: "recover", Step: "release the recover lease", Rest: true, Err: timedOut}, false, true, "release the recover lease: left the lease held until it expires (or this Maintenance's next run takes it back): another transaction", stepLeft},
		{&ratelimit.LockWaitError{Job: "prune", Step: "release the prune lease", Rest: true, Err: timedOut}, false, true, "release the prune lease: left the lease held until it expires", stepLeft},
		// A step's, even one whose name speaks of a lease, and another job's lease.
		{&ratelimit.LockWaitError{Job: "recover", Step: "release expired leases", Rest: true, Err: timedOut}, false, false, stepLeft, "did nothing"},
		{&ratelimit.LockWaitError{Job: "recover", Step: "take the prune lease", Rest: true, Err: timedOut}, false, false, stepLeft, "did nothing"},
		{&ratelimit.LockWaitError{Job: "prune", Step: "counters", Rows: 3, Err: timedOut}, false, false, "left 3 rows:", "did nothing"},
		{&ratelimit.LockWaitError{}, false, false, stepLeft, "did nothing"},
	} {
		if got := c.err.LeaseTake(); got != c.take {
			t.Errorf("%+v: LeaseTake() = %v, want %v", *c.err, got, c.take)
		}
		if got := c.err.LeaseRelease(); got != c.rel {
			t.Errorf("%+v: LeaseRelease() = %v, want %v", *c.err, got, c.rel)
		}
		got := c.err.Error()
		if !strings.Contains(got, c.says) || strings.Contains(got, c.denies) {
			t.Errorf("%q: want it to say %q, and not %q", got, c.says, c.denies)
		}
		if !strings.Contains(got, "another transaction held a lock past the lock timeout") {
			t.Errorf("%q does not say why", got)
		}
	}
	var none *ratelimit.LockWaitError
	if none.LeaseTake() || none.LeaseRelease() {
		t.Error("a nil *LockWaitError is of the take or the release of a lease")
	}
}
