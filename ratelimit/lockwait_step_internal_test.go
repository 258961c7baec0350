package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A *LockWaitError's own message did not name its job and step: the run's
// error that wrapped it did, but a caller that found it with errors.As and
// logged it read "left 3 rows: ..." of no step, and a step that also left
// a row the server rejected said its step on the first line only (the lock
// wait was the second line of the joined error, named by nothing). It now
// names them itself, and what wraps it does not name them again.
func TestLockWaitErrorNamesItsStepOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	timedOut := &pgconn.PgError{Severity: "ERROR", Code: "55P03", Message: "canceling statement due to lock timeout"}
	rejected := &pgconn.PgError{Severity: "ERROR", Code: "23514", Message: "check constraint"}
	const step = "release reservations of finished tasks"
	const why = "another transaction held a lock past the lock timeout: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)"
	const whyBound = "another transaction held a lock past the lock timeout (1s): ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)" // what the step ran with
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"its own", &LockWaitError{Job: jobRecover, Step: step, Rows: 3, Err: timedOut},
			"ratelimit: recover: " + step + ": left 3 rows: " + why},
		{"a step's", stepError(ctx, jobRecover, step, time.Second, &LockWaitError{Rows: 3, Err: timedOut}),
			"ratelimit: recover: " + step + ": left 3 rows: " + whyBound},
		{"a step's beside a row rejected", stepError(ctx, jobRecover, step, time.Second,
			errors.Join(errors.New("left 1 row the server rejected: "+rejected.Error()), &LockWaitError{Rows: 3, Err: timedOut})),
			"ratelimit: recover: " + step + ": left 1 row the server rejected: ERROR: check constraint (SQLSTATE 23514)\n" +
				"ratelimit: recover: " + step + ": left 3 rows: " + whyBound},
		{"the take's", takeError(ctx, jobPrune, lockWait(jobPrune, takeStep(jobPrune), time.Second, timedOut)),
			"ratelimit: prune: take the prune lease: the run did nothing: " + whyBound},
		{"the release's", withRelease(ctx, jobPrune, nil, releaseError(jobPrune, time.Second, timedOut)),
			"ratelimit: prune: release the prune lease: left the lease held until it expires (or this Maintenance's next run takes it back): " + whyBound},
		{"the release's, not a lock wait", withRelease(ctx, jobPrune, nil, releaseError(jobPrune, time.Second, errors.New("conn closed"))),
			"ratelimit: prune: release the prune lease: conn closed"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
		var lw *LockWaitError
		if errors.As(c.err, &lw) && !strings.HasPrefix(lw.Error(), errPrefix+lw.Job+": "+lw.Step+": ") {
			t.Errorf("%s: the *LockWaitError in it says %q, which does not name its job and step", c.name, lw)
		}
	}
}
