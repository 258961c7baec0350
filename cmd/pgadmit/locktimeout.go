package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/errwalk"
	"github.com/pgadmit/pgadmit/internal/locktimeout"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// defaultLockTimeout is --lock-timeout's default. The flag bounds how long inspect and doctor
// wait for a lock on a table they read (PostgreSQL's lock_timeout, set for their own transaction
// only, so that it is safe behind PgBouncer in transaction mode): a long migration holds the
// tables it alters ACCESS EXCLUSIVE, and a reader that waits behind it would hang, and hold up
// every statement queued after it. It also bounds each wait for a lock of a batch of recover and
// prune (WithMaintenanceLockTimeout; lock_timeout applies to each lock waited for, so a batch that
// waits for several in turn can take several times this): a transaction left idle with a counter
// row locked would hang them, and every later pass of a sweeper.
const defaultLockTimeout = 5 * time.Second

// lockTimeoutFlag adds --lock-timeout to inspect, doctor, recover and prune; past says what the
// command does past it (pastGiveUp, pastLeaveBatch, pastLeaveBatchOrSweepOn). 0 sets no bound of
// pgadmit's, as lock_timeout = 0 means none to PostgreSQL: the server's own setting, if any, applies.
func lockTimeoutFlag(fs *flag.FlagSet, past string) *time.Duration {
	return fs.Duration("lock-timeout", defaultLockTimeout,
		"wait at most `duration` for a lock another session holds (a migration's, an idle transaction's), then "+past+" (0: no bound)")
}

// What a command does past --lock-timeout: inspect and doctor give up; recover and prune leave
// that batch and do the rest; recover's sweeper (--every) logs the pass as failed and goes on.
const (
	pastGiveUp              = "give up on it and exit 1"
	pastLeaveBatch          = "leave that batch to a later run, do the rest and exit 1"
	pastLeaveBatchOrSweepOn = "leave that batch to a later pass, do the rest and exit 1; with --every, log the pass as failed and sweep on"
)

// maxLockTimeout is the largest --lock-timeout: lock_timeout is an int of milliseconds. A larger
// bound is set as this one (locktimeout.Millis caps it, for inspect and for ratelimit's
// WithMaintenanceLockTimeout and WithDoctorLockTimeout), so the errors of a wait would name a
// bound that did not apply: it is refused instead.
const maxLockTimeout = locktimeout.Max // 596h31m23.647s

// checkLockTimeout refuses a negative --lock-timeout, and one past lock_timeout's range.
func checkLockTimeout(d time.Duration) error {
	if d < 0 {
		return usagef("--lock-timeout must be >= 0 (0: no bound), got %s", durationtext.Operator(d))
	}
	if d > maxLockTimeout {
		return usagef("--lock-timeout must be at most %s (PostgreSQL's lock_timeout: %d ms; 0: no bound), got %s",
			durationtext.Operator(maxLockTimeout), math.MaxInt32, durationtext.Operator(d))
	}
	return nil
}

// gaveUpAfter says what a command's wait for a lock was bounded by: --lock-timeout, rounded up
// to a millisecond as lock_timeout is set (1500µs waits 2ms), or with 0, which sets none, the
// server's own lock_timeout (a role's or a database's setting).
func gaveUpAfter(bound time.Duration) string {
	if bound > 0 {
		return durationtext.Operator(locktimeout.Applied(bound)) + " (--lock-timeout)"
	}
	return "the server's own lock_timeout (--lock-timeout 0 sets none)"
}

// boundLockWaits sets what inspect's transaction runs with, for tx only, as its first statement
// (SetMaintenanceSettings): jit off (inspect's reads are bounded, but planned for every row of
// the tables they read, where compiling costs more than it saves), and lock_timeout to bound
// (--lock-timeout); 0 sets no lock_timeout: the server's own applies.
func boundLockWaits(ctx context.Context, q *db.Queries, tx pgx.Tx, bound time.Duration) error {
	return q.SetMaintenanceSettings(ctx, tx, locktimeout.Millis(bound))
}

// lockTimeoutError is a command's failure when a table it reads stayed locked by another session
// for longer than its bound (SQLSTATE 55P03, lock_not_available).
type lockTimeoutError struct {
	err   error
	bound time.Duration // --lock-timeout
}

func (e *lockTimeoutError) Error() string {
	return fmt.Sprintf("a table it reads is locked by another session (a migration?): gave up after %s; try again later (%v)", gaveUpAfter(e.bound), e.err)
}

func (e *lockTimeoutError) Unwrap() error { return e.err }

// lockTimedOut returns err as a *lockTimeoutError when the server gave up waiting for a lock,
// under bound (--lock-timeout); other errors pass through unchanged.
func lockTimedOut(err error, bound time.Duration) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return &lockTimeoutError{err: err, bound: bound}
	}
	return err
}

// lockWaitError is a recover or prune run's failure when rows (or a table) it had to lock stayed
// locked by another session for longer than its bound (--lock-timeout, or the lease's own 4 s
// when that is less): it left them (and, after a second such wait in a step, the rest of that
// step; the wrapped error says which), its counts say what it did, and a later run takes what it
// left once that session lets go. A run that could not take its lease did nothing; one whose
// release gave up did its work and left its lease held, and another process's run is skipped
// until that lease expires (recover --every's next pass takes it back).
type lockWaitError struct {
	err   error
	bound time.Duration // --lock-timeout
	pass  bool          // a pass of recover --every, whose sweeper runs the next one itself
}

func (e *lockWaitError) Error() string {
	// A *ratelimit.LockWaitError says the bound it gave up after (its Bound): this names the
	// flag that set it, and the duration only when none of them says it (--lock-timeout 0).
	stated := boundsStated(e.err)
	after, did := gaveUpAfter(e.bound), "left what it could not lock (what it did is counted)"
	if stated {
		after = "at --lock-timeout"
	} else {
		after = "after " + after
	}
	then := "run it again once that session lets go"
	if e.pass {
		then = "the next pass tries again once that session lets go"
	}
	// The take and the release of a run's lease wait 4 s at most, whatever the flag says: the
	// error's Bound names the bound that applied. A run's lock waits share one bound but for
	// those: a take that gave up is its run's only error, a release that gave up may come after
	// the run's own lock waits (errors.As would find one of those first).
	if lw, steps := leaseLockWait(e.err); lw != nil {
		if lw.Bound > 0 && lw.Bound < e.bound {
			lease := fmt.Sprintf("after %s (the most the take or release of a run's lease waits; --lock-timeout %s)", durationtext.Operator(lw.Bound), durationtext.Operator(e.bound))
			if stated {
				lease = fmt.Sprintf("at the bound of a run's lease (less than --lock-timeout %s)", durationtext.Operator(e.bound))
			}
			if steps {
				after += ", and on its lease " + lease
			} else {
				after = lease
			}
		}
		switch {
		case lw.LeaseTake():
			did = "did nothing"
		case lw.LeaseRelease():
			did = "left the run's lease held (what it did is counted)"
			if steps {
				did = "left what it could not lock and the run's lease held (what it did is counted)"
			}
			// The same Maintenance takes it back; a new process's run is skipped until it expires,
			// its TTL after the run last renewed it, which was before the release gave up.
			then = fmt.Sprintf("run it again once that session lets go and the lease has expired, at most %s from now (a run before then is skipped)",
				durationtext.Operator(ratelimit.DefaultMaintenanceLeaseTTL))
			if e.pass {
				then = "the next pass takes it back once that session lets go"
			}
		}
	}
	return fmt.Sprintf("another session held locks it needed (a transaction left idle in transaction, a migration?): gave up on them %s and %s; %s (%v)", after, did, then, e.err)
}

func (e *lockWaitError) Unwrap() error { return e.err }

// boundsStated reports whether every *ratelimit.LockWaitError that err holds says the bound it
// gave up after (a Bound of pgadmit's: not 0, the server's own), and it holds one.
func boundsStated(err error) bool {
	found, stated := false, true
	errwalk.Each(err, func(w *ratelimit.LockWaitError) {
		found, stated = true, stated && w.Bound > 0
	})
	return found && stated
}

// leaseLockWait finds, among the *ratelimit.LockWaitError that err holds however joined and
// wrapped, the take's or the release's of the run's lease (else the first), and says whether
// the run's steps left rows behind a lock too.
func leaseLockWait(err error) (lw *ratelimit.LockWaitError, steps bool) {
	errwalk.Each(err, func(w *ratelimit.LockWaitError) {
		lease := w.LeaseTake() || w.LeaseRelease()
		steps = steps || !lease
		if lw == nil || lease {
			lw = w
		}
	})
	return lw, steps
}

// lockWaited returns err as a *lockWaitError when the run's every error is a step that gave up
// waiting for a lock (a *ratelimit.LockWaitError) under bound (--lock-timeout); other errors
// pass through unchanged: a run also cut off (its deadline, the connection lost) or rejected is
// told by its own errors, which name the lock waits too.
func lockWaited(err error, bound time.Duration) error {
	if err != nil && ratelimit.OnlyLockWaits(err) {
		return &lockWaitError{err: err, bound: bound}
	}
	return err
}

// passLockWaited is lockWaited for a pass of recover --every, whose sweeper runs the next pass
// itself, with the same Maintenance, which takes back a lease the pass could not release.
func passLockWaited(err error, bound time.Duration) error {
	if err = lockWaited(err, bound); err != nil {
		if lwe, ok := err.(*lockWaitError); ok {
			lwe.pass = true
		}
	}
	return err
}
