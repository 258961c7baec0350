package ratelimit

import (
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// Maintenance runs pgadmit's housekeeping: Recover gives back what dead
// processes hold, Prune keeps the tables bounded (once Recover ended what
// dead processes left running), Doctor checks the books.
// Each of them works in many short transactions of its own (Doctor in one
// read), never inside a caller's transaction, so a Maintenance is built
// from a pool, not from a pgx.Tx. It keeps no session state (single flight
// is a lease row, see Recover), so the pool may go through a
// transaction-pooling proxy such as PgBouncer. It is safe for concurrent
// use; any number of processes may run maintenance on one database. Make
// one with NewMaintenance: Recover, Prune and Doctor of a zero or nil
// Maintenance fail with a *ValidationError on "Maintenance" (errors.Is
// ErrInvalidInput) and write nothing. A run that could not give its lease
// up (the database restarted under it) leaves it to the next run of the
// same Maintenance, which takes it back at once instead of waiting for it
// to expire: keep one Maintenance for a process's runs. Every transaction
// of Recover, Prune and Doctor runs with jit off (for that transaction
// only, as lock_timeout is set: SetMaintenanceSettings): planned for whole
// tables, their bounded batches passed jit_above_cost and spent more time
// compiling than running.
type Maintenance struct {
	pool    Executor // a pool, or noConn for a nil one
	queries *db.Queries
	opts    maintenanceOptions
	left    *leftLeases // leases its runs could not give up
	// parsesFirst: the pool's exec mode prepares a statement before it runs
	// it (lockBoundedTx then serves).
	parsesFirst bool
}

// NewMaintenance returns the housekeeping of the database of pool, which
// must have been migrated (schema.Migrate). A nil pool makes Recover,
// Prune and Doctor fail with a *ValidationError naming "pool" (errors.Is
// ErrInvalidInput).
func NewMaintenance(pool *pgxpool.Pool, opts ...MaintenanceOption) *Maintenance {
	o := defaultMaintenanceOptions()
	for _, opt := range opts {
		if opt != nil { // a nil option sets nothing
			opt(&o)
		}
	}
	m := &Maintenance{pool: orNoConn(pool, "pool"), queries: db.New(), opts: o, left: &leftLeases{}}
	if pool != nil {
		m.parsesFirst = parsesFirst(execMode(pool))
	}
	return m
}

// MaintenanceOption configures a Maintenance.
type MaintenanceOption func(*maintenanceOptions)

type maintenanceOptions struct {
	recoveryBatchSize int
	maxRequeues       int
	pruneBatchSize    int
	pruneEvents       bool
	taskRetention     time.Duration // < 0: finished tasks are kept
	leaseTTL          time.Duration
	lostGrace         time.Duration
	doctorLockTimeout time.Duration // WithDoctorLockTimeout; 0: none
	lockTimeout       time.Duration // WithMaintenanceLockTimeout; 0: none
	clock             clock
	progress          func(Progress) // WithProgress
	progressEvery     time.Duration
}

func defaultMaintenanceOptions() maintenanceOptions {
	return maintenanceOptions{
		recoveryBatchSize: DefaultRecoveryBatchSize,
		maxRequeues:       DefaultMaxRequeues,
		pruneBatchSize:    DefaultPruneBatchSize,
		taskRetention:     DefaultTaskRetention,
		leaseTTL:          DefaultMaintenanceLeaseTTL,
		lostGrace:         DefaultLostAllotmentGrace,
	}
}

// Defaults of the maintenance options.
const (
	// DefaultRecoveryBatchSize is how many rows one recovery transaction
	// handles at most (WithRecoveryBatchSize).
	DefaultRecoveryBatchSize = 500
	// DefaultMaxRequeues is how many times Recover requeues an async task
	// whose execution lease expired before it fails the task for good
	// (WithMaxRequeues).
	DefaultMaxRequeues = 5
	// DefaultPruneBatchSize is how many rows one prune statement deletes at
	// most (WithPruneBatchSize).
	DefaultPruneBatchSize = 5000
	// DefaultTaskRetention is how long Prune keeps a finished task, with its
	// attempts and events, after it finished (WithTaskRetention).
	DefaultTaskRetention = 7 * 24 * time.Hour
	// DefaultMaintenanceLeaseTTL is how long a Recover or Prune run holds its
	// job against other processes without renewing its lease; a run renews
	// it as it goes, and a crashed run's lease lapses after this long.
	DefaultMaintenanceLeaseTTL = 15 * time.Second
	// DefaultLostAllotmentGrace is how long after its window ended, and
	// after its holder's last report, Recover (and Doctor) take an
	// allotment for lost (WithLostAllotmentGrace).
	DefaultLostAllotmentGrace = 5 * time.Second
	// MinLostAllotmentGrace is the shortest grace WithLostAllotmentGrace
	// sets: two of a live holder's report periods (it reports every second
	// while requests admitted from its blocks are in flight).
	MinLostAllotmentGrace = 2 * allotSyncEvery
)

// WithRecoveryBatchSize sets how many rows one recovery transaction handles
// at most (default DefaultRecoveryBatchSize, 500; reservations, those of
// reclaimed tasks included, are released 256 at most per statement);
// Recover loops until nothing is left. An n below 1 leaves the default; one
// above math.MaxInt32 is math.MaxInt32.
func WithRecoveryBatchSize(n int) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if n > 0 {
			o.recoveryBatchSize = min(n, math.MaxInt32) // a LIMIT is an int4
		}
	}
}

// WithMaxRequeues sets how many times recovery requeues an async task whose
// execution lease expired before it fails the task for good (default
// DefaultMaxRequeues, 5). Zero fails it at its first expiry; a negative n
// leaves the default, and one above math.MaxInt32 is math.MaxInt32.
func WithMaxRequeues(n int) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if n >= 0 {
			o.maxRequeues = min(n, math.MaxInt32) // compared with an int4
		}
	}
}

// WithPruneBatchSize sets how many rows one prune statement deletes at most
// (default DefaultPruneBatchSize, 5000; for tasks, how many tasks, each
// with its attempts and events, and for events (WithPruneEvents) how many
// tasks' events; stale reservations are released 256 at most per
// statement); Prune loops until nothing is left. An n below 1 leaves the
// default; one above math.MaxInt32 is math.MaxInt32.
func WithPruneBatchSize(n int) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if n > 0 {
			o.pruneBatchSize = min(n, math.MaxInt32) // a LIMIT is an int4
		}
	}
}

// WithPruneEvents makes Prune also delete the events of tasks that finished
// before its cutoff, while the tasks themselves stay until the task
// retention (default false: a task's events go with the task). Prune walks
// finished tasks in finish order from where its last run stopped; events
// appended to a task after the walk passed it, or of a task whose finish
// committed later than its finish time plus the cutoff's age, stay until
// the task itself is deleted.
func WithPruneEvents(on bool) MaintenanceOption {
	return func(o *maintenanceOptions) { o.pruneEvents = on }
}

// WithTaskRetention sets how long Prune keeps a finished task after it
// finished (default DefaultTaskRetention, 7 days); Prune then deletes it
// with its attempts, events and queue admissions. A negative d keeps
// finished tasks forever; zero leaves the default.
func WithTaskRetention(d time.Duration) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if d != 0 {
			o.taskRetention = d
		}
	}
}

// WithMaintenanceLeaseTTL sets how long a Recover or Prune run holds its
// job without renewing its lease (default DefaultMaintenanceLeaseTTL,
// 15 s). A run renews it whenever a third of it has passed. A d under one
// second is one second, the shortest lease a run keeps renewed between its
// batches; zero or negative leaves the default.
func WithMaintenanceLeaseTTL(d time.Duration) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if d > 0 {
			o.leaseTTL = max(d, time.Second)
		}
	}
}

// WithLostAllotmentGrace sets when Recover (and Doctor) take an allotment
// for lost: once its window ended, and its holder last reported, this long
// ago (default DefaultLostAllotmentGrace, 5 s; a live holder returns its
// blocks at their window's end and reports every second while requests
// admitted from them are in flight). A d under MinLostAllotmentGrace, 2 s, is
// MinLostAllotmentGrace: a shorter grace would take a live holder's block
// for lost between two of its reports and return it charging the last one,
// leaving what the holder admitted since uncharged. Zero or negative leaves
// the default.
func WithLostAllotmentGrace(d time.Duration) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if d > 0 {
			o.lostGrace = max(d, MinLostAllotmentGrace)
		}
	}
}

// WithDoctorLockTimeout bounds how long Doctor waits for a lock on a table it
// reads (one that a migration's ALTER TABLE holds, for instance): past d it
// fails with the server's lock_not_available (SQLSTATE 55P03) instead of
// waiting on. lock_timeout is set for Doctor's transaction only, as
// WithMaintenanceLockTimeout sets it for a batch (safe behind a
// transaction-pooling proxy; in pgx's exec modes that prepare a statement
// first, its default among them, Doctor runs in a transaction of its own,
// which a proxy that pools by statement refuses). Default 0: no bound but
// the context's (or WithMaintenanceLockTimeout's
// when that is given: WithDoctorLockTimeout overrides it for Doctor alone,
// whatever the order of the options). d is rounded up to a millisecond,
// lock_timeout's unit, and past lock_timeout's range (about 24.8 days) is
// that range's end; zero or negative sets nothing.
func WithDoctorLockTimeout(d time.Duration) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if d > 0 {
			o.doctorLockTimeout = d
		}
	}
}

// WithMaintenanceLockTimeout bounds how long a batch of Recover and Prune
// waits for each lock another transaction holds, such as a counter row
// that a gateway's transaction left idle. Default 0: no bound but the
// context's.
//
// Past d the server gives up with lock_not_available (SQLSTATE 55P03) and
// the batch rolls back whole. Recover and Prune then leave that batch's
// rows to a later run, go on with the rest, and report what they left with
// a *LockWaitError. They leave the rest of the step too after a second
// such batch in the step, or when the step is one statement. A batch that
// releases reservations, or reclaims tasks holding them, is first tried
// once more without those whose counter another transaction still holds,
// found without waiting: only they are left then.
//
// lock_timeout bounds each wait for a lock, not the batch: a batch that
// waits for several locks in turn can take several times d. It bounds the
// wait for a table's lock too (one a migration's ALTER TABLE holds), which
// the server meets already when it parses a statement.
//
// It bounds the take, renewal and release of a run's lease too:
//   - a take that gives up fails the run, which did nothing, with a
//     *LockWaitError for the step "take the recover lease" (or "take the
//     prune lease");
//   - a renewal that gives up stops the run with a *LockWaitError for the
//     step it was in;
//   - a release that gives up leaves the lease held (until its TTL, or this
//     Maintenance's next run takes it back) with a *LockWaitError for the
//     step "release the recover lease" (or "release the prune lease").
//
// The take and the release have a timeout of their own besides, 5 s,
// within which they wait for a lock at most d, never more than 4 s.
// Without this option they wait 4 s at most too, and give up so, in
// pgx.QueryExecModeExec and the simple protocol, where the setting costs
// nothing. In the exec modes that prepare a statement first their own
// timeout ends them, with a client timeout (context.DeadlineExceeded). A
// *LockWaitError's Bound is the bound the server gave up after.
//
// lock_timeout is set for each batch's transaction only, never for the
// session, so it is safe behind a transaction-pooling proxy. It is set
// before the server parses the batch's statement: in the statement's own
// round trip where pgx sends it in one (pgx.QueryExecModeExec, the simple
// protocol). Where pgx prepares or describes a statement first (its
// default, cache_statement, and cache_describe, describe_exec), the
// statement runs in a transaction of its own, begun and bounded in round
// trips of their own: three more per statement, and a proxy that pools by
// statement refuses the transaction block. A batch that reclaims expired
// tasks, a transaction of its own already, sets it in a round trip of its
// own before the batch, whatever the exec mode.
//
// It bounds Doctor too, as WithDoctorLockTimeout(d) would, unless
// WithDoctorLockTimeout gives Doctor a bound of its own. d is rounded up to
// a millisecond, lock_timeout's unit, and past lock_timeout's range (about
// 24.8 days) is that range's end; zero or negative sets nothing.
func WithMaintenanceLockTimeout(d time.Duration) MaintenanceOption {
	return func(o *maintenanceOptions) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}
