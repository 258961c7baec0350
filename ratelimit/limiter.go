package ratelimit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
)

// Executor is what a Limiter runs its statements on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx all satisfy it.
type Executor interface {
	db.DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Limiter admits requests against limits kept in PostgreSQL. It is safe for
// concurrent use; many Limiters in many processes may share one database.
type Limiter struct {
	conn    Executor
	inTx    bool
	order   *txOrder // set when bound to a caller's transaction
	queries *db.Queries
	opts    options
}

// New returns a Limiter that runs on conn, usually a *pgxpool.Pool. The
// database must have been migrated (schema.Migrate).
func New(conn Executor, opts ...Option) *Limiter {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	l := &Limiter{conn: conn, queries: db.New(), opts: o}
	if _, ok := conn.(pgx.Tx); ok {
		l.inTx, l.order = true, &txOrder{}
	}
	return l
}

// WithTx returns a Limiter that runs every operation inside tx, the caller's
// transaction: admission then commits or rolls back with the caller's own
// writes. Use one such Limiter per transaction, and keep the transaction
// short: the row and advisory locks its operations take are held until tx
// ends.
//
// tx must be READ COMMITTED (ErrIsolation otherwise). Several operations may
// share tx only in the global lock order — counters, then concurrency
// scopes, then queue scopes, then rows — for example Reserve then
// CreateTask, but not Reserve twice or CreateTask then Reserve; an operation
// out of order is refused with a *LockOrderError before it runs, since it
// could deadlock with other transactions. Housekeeping (Recover, Prune,
// Doctor) is not a Limiter's: it runs its own transactions, on a
// Maintenance built from a pool.
func (l *Limiter) WithTx(tx pgx.Tx) *Limiter {
	c := *l
	c.conn = tx
	c.inTx = true
	c.order = &txOrder{}
	return &c
}

// Option configures a Limiter.
type Option func(*options)

type options struct {
	clock      clock
	lockPrefix int32
}

func defaultOptions() options { return options{} }

// WithAdvisoryLockPrefix makes the advisory locks that serialize task
// creation on a queue scope use keys with prefix in their upper 32 bits
// and a hash of the scope in the lower 32, as River's AdvisoryLockPrefix
// does: advisory locks share one 64-bit key space per database, so a host
// application can keep its own keys apart from pgadmit's by giving pgadmit
// a prefix of its own. 0, the default, keeps pgadmit's 64-bit hashed keys.
// Every process creating tasks in one database must use the same prefix,
// or queue_size limits are no longer exact.
//
// The advisory locks of concurrency scopes are taken inside the function
// pgadmit_reserve (and by RenewLeases, which must match them) and keep
// their 64-bit hashed keys ('pgadmit/concurrent/...') whatever the prefix.
// Maintenance and migrations take no advisory locks: they use lease rows.
func WithAdvisoryLockPrefix(prefix int32) Option {
	return func(o *options) { o.lockPrefix = prefix }
}

// Defaults applied when a Limit leaves them zero.
const (
	DefaultWindow   = 60 * time.Second
	DefaultLeaseTTL = 120 * time.Second
)
