package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
)

// ErrMaintenanceLeaseLost is returned by a Recover or Prune run that could
// not renew its job's lease in time: it expired and another process took
// the job over. The work done so far stands (every batch is correct on its
// own); the run stopped so that two processes do not repeat each other.
var ErrMaintenanceLeaseLost = errors.New("ratelimit: maintenance lease lost: another process took the job over")

// Names of the maintenance jobs, as recorded in gateway_maintenance_leases.
const (
	jobRecover = "recover"
	jobPrune   = "prune"
)

// jobLease is one run's hold on a maintenance job: a row of
// gateway_maintenance_leases, taken, renewed and released by short
// statements of their own, so that no session state is involved.
type jobLease struct {
	m       *Maintenance
	name    string
	holder  string
	renewed time.Time // this process's clock, to decide when to renew
}

// takeLease takes the lease of job name for this run. It returns nil and
// no error when another process holds it.
//
// The statement is not interrupted when ctx ends while it runs: an
// interrupted take may still commit on the server, and would then hold the
// job, for no one, until the lease expired. It gets a bounded time of its
// own instead; a lease taken after ctx ended is given up at once. Its wait
// for a lock is bounded as a batch's is (WithMaintenanceLockTimeout), 4 s
// at most, and 4 s without the option where that costs no round trip
// (leaseLockTimeout): its *LockWaitError's Bound says which.
func (m *Maintenance) takeLease(ctx context.Context, name string) (*jobLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A lease an earlier run of this Maintenance could not give up (the
	// database went away mid-run) is taken back under its holder's name,
	// which the take extends, instead of being waited out as another
	// process's.
	holder := m.left.pop(name)
	if holder == "" {
		holder = newHolder()
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStatementTimeout)
	defer cancel()
	row, err := m.queries.MaintenanceLeaseTake(tctx, m.leaseConn(), db.MaintenanceLeaseTakeParams{
		Name: name, Holder: holder, TtlSeconds: m.opts.leaseTTL.Seconds(), Now: m.opts.clock.at(),
	})
	if err != nil {
		m.left.put(name, holder) // it may still hold the lease
		return nil, lockWait(name, takeStep(name), m.leaseLockTimeout(), err)
	}
	if !row.Acquired {
		return nil, nil
	}
	lease := &jobLease{m: m, name: name, holder: holder, renewed: time.Now()}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, lease.release(ctx))
	}
	return lease, nil
}

// leaseStatementTimeout bounds the statements that take and give up a
// lease, which run whether or not the caller's context has ended.
const leaseStatementTimeout = 5 * time.Second

// leaseLockTimeout is how long the take and the release of a lease wait
// for a lock: the lock bound (WithMaintenanceLockTimeout), kept a second
// short of their own timeout, so that a lock held too long ends them with
// the server's lock_not_available (55P03), not a client timeout (a
// context.DeadlineExceeded the caller's context had no part in). Without
// the option, that second short of their timeout too, where the bound
// costs nothing: in the exec modes that send a statement in the round trip
// that runs it (lockBounded: the setting goes in the same round trip). In
// those that prepare it first, bounding it would take a transaction block
// of its own, which a statement-pooling proxy refuses: 0 there, none (their
// own timeout bounds them).
func (m *Maintenance) leaseLockTimeout() time.Duration {
	most := leaseStatementTimeout - time.Second
	switch {
	case m.opts.lockTimeout > 0:
		return min(m.opts.lockTimeout, most)
	case m.parsesFirst:
		return 0
	}
	return most
}

// leaseConn is what the take and the release of a lease go through: the
// pool behind leaseLockTimeout.
func (m *Maintenance) leaseConn() Executor {
	return m.lockConn(m.leaseLockTimeout())
}

// takeStep names the take of job's lease in the run's errors.
func takeStep(job string) string { return "take the " + job + " lease" }

// leaseReleaseStep names the release of job's lease in the run's errors.
func leaseReleaseStep(job string) string { return "release the " + job + " lease" }

// takeError is the error of a run of job that could not take its lease
// (takeLease's: a *LockWaitError of the take when the server gave up
// waiting for a lock on the take's statement; one of the release, beside
// ctx's error, when it did on the release of a lease taken after ctx
// ended), with the caller's context's error beside it when that ended
// meanwhile.
func takeError(ctx context.Context, job string, err error) error {
	err = wrapDBError(ctx, job+": "+takeStep(job), err)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(err, cerr)
	}
	return err
}

// keep renews the lease once a third of its time-to-live has passed since
// it was last renewed; it is called between batches. ErrMaintenanceLeaseLost
// when another process holds it now. The renewal waits for a lock at most
// as long as a batch does (WithMaintenanceLockTimeout): a migration holding
// the leases table then stops the run with a lock wait of the step it was
// in, instead of hanging it.
func (j *jobLease) keep(ctx context.Context) error {
	if time.Since(j.renewed) < j.m.opts.leaseTTL/3 {
		return nil
	}
	_, err := j.m.queries.MaintenanceLeaseRenew(ctx, j.m.stepConn(), db.MaintenanceLeaseRenewParams{
		Name: j.name, Holder: j.holder, TtlSeconds: j.m.opts.leaseTTL.Seconds(), Now: j.m.opts.clock.at(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (job %s, holder %s)", ErrMaintenanceLeaseLost, j.name, j.holder)
	}
	if err != nil {
		return fmt.Errorf("renew the %s lease: %w", j.name, err)
	}
	j.renewed = time.Now()
	return nil
}

// release gives the lease up, also when ctx is already done, so that the
// next run need not wait for it to expire. A lease this run no longer held
// is not an error: it was lost, and keep has said so. Its wait for a lock
// is bounded as the take's is (leaseConn), and one that gives up is a
// *LockWaitError of the step "release the <job> lease", as the take's is
// of its own: the lease stays held, for this Maintenance's next run to
// take back or another process's to wait out.
func (j *jobLease) release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStatementTimeout)
	defer cancel()
	_, err := j.m.queries.MaintenanceLeaseRelease(rctx, j.m.leaseConn(), db.MaintenanceLeaseReleaseParams{Name: j.name, Holder: j.holder})
	if err != nil {
		j.m.left.put(j.name, j.holder) // for the next run to take back
		return releaseError(j.name, j.m.leaseLockTimeout(), err)
	}
	return nil
}

// releaseError is the error of the release of job's lease that failed
// with err, whose wait for a lock was bounded by bound: a *LockWaitError
// of the step, which names it itself, or err after the step's name.
func releaseError(job string, bound time.Duration, err error) error {
	step := leaseReleaseStep(job)
	if err = lockWait(job, step, bound, err); errors.As(err, new(*LockWaitError)) {
		return err
	}
	return fmt.Errorf("%s: %w", step, err)
}

// withRelease is the error of a run of job that ended with err (nil: none)
// and gave its lease up with rerr (release's): err, and rerr after it, so
// that a run that failed a step still says that it left its lease held.
func withRelease(ctx context.Context, job string, err, rerr error) error {
	if rerr == nil {
		return err
	}
	rerr = wrapDBError(ctx, job, rerr)
	if err == nil {
		return rerr
	}
	return errors.Join(err, rerr)
}

// leftLeases remembers, per job, the holder of a run of one Maintenance
// that may have left its lease behind: its release (or its take) failed.
// The next run pops it and takes the lease under that name. A holder is
// popped by one run only, so two runs never share one.
type leftLeases struct {
	mu      sync.Mutex
	holders map[string]string // job -> holder
}

func (l *leftLeases) put(job, holder string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holders == nil {
		l.holders = map[string]string{}
	}
	l.holders[job] = holder
}

func (l *leftLeases) pop(job string) string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	holder := l.holders[job]
	delete(l.holders, job)
	return holder
}
