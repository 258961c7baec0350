package ratelimit

import (
	"context"
	"math"
	"sync/atomic"
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

// Limiter admits requests against limits kept in PostgreSQL: Reserve
// admits one, Commit or Release settles what it took. It is safe for
// concurrent use (one made from a single connection serves one call at a
// time: see New); many Limiters in many processes may share one database.
// Make one with New: every operation of a zero Limiter, or of a nil
// *Limiter, fails with a *ValidationError on "Limiter" (errors.Is
// ErrInvalidInput) and writes nothing.
type Limiter struct {
	conn    Executor
	inTx    bool
	order   *txOrder // set when bound to a caller's transaction
	queries *db.Queries
	opts    options
	// Combiners of concurrent Reserve and Commit/Release calls; nil inside
	// a caller's transaction or WithoutCombining.
	reserves *combiner[*admission, Grant]
	settles  *combiner[*settleRequest, Settlement]
	// oneQueryBatches is set when the Executor sends a pgx.Batch as one
	// multi-statement query (the simple protocol): no hot batches then
	// (hotbatch.go). Shared with the Limiter's WithTx copies.
	oneQueryBatches *atomic.Bool
	// Blocks of Local limits; nil inside a caller's transaction and on a
	// single connection.
	allot *allotments
	// admitted is allot, kept by the Limiter's WithTx copies, which take
	// no blocks but settle what allot admitted: a grant's own handle does
	// so there, and so does a copy of it decoded from JSON, by its
	// LocalID.
	admitted *allotments
	// unheld runs the give-backs of what nobody holds off their callers'
	// goroutines, unheldAtOnce at a time (giveBackUnheld); Close waits for
	// them. Nil on a single connection or a transaction (New's own, or a
	// WithTx copy's), which runs none so: one statement at a time there.
	unheld *backlog[func(handedOver time.Time)]
	// lost counts what this Limiter may have left held for nobody
	// (Stats.Lost), dropped of them the give-backs dropped from a full
	// queue (Stats.GiveBacksDropped; countDropped), failed those whose
	// tries ran out (Stats.GiveBacksFailed; retryUnheld). Shared with the
	// Limiter's WithTx copies.
	lost, dropped, failed *atomic.Int64
}

// New returns a Limiter that runs on conn, usually a *pgxpool.Pool. The
// database must have been migrated (schema.Migrate). A nil conn (a nil
// *pgxpool.Pool too, or an Executor of one's own that embeds one) makes
// every operation fail with a *ValidationError naming "conn" (errors.Is
// ErrInvalidInput; its Value names an Executor of one's own and the nil it
// embeds, "main.traced embedding a nil *pgxpool.Pool"), and so does a
// *pgxpool.Conn already released to its pool (or hijacked from it): its
// methods would panic. Nothing is written.
//
// conn may be a single connection instead: a *pgx.Conn, a pool's
// *pgxpool.Conn, or an Executor of one's own that embeds one, directly
// (struct{ *pgxpool.Conn }, a pointer to one), in an embedded Executor
// (struct{ Executor }) or nested. A Limiter on it runs one statement at a
// time: it combines nothing and decides Local limits in the database. Like
// the connection, it serves one call at a time: calls made at once from
// several goroutines fail ("conn busy"). An Executor of one's own that
// holds its connection in a field not embedded is taken for a pool.
func New(conn Executor, opts ...Option) *Limiter {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil { // a nil Option (an unset one, conditionally chosen) sets nothing
			opt(&o)
		}
	}
	conn = orNoConn(conn, "conn")
	l := &Limiter{conn: conn, queries: db.New(), opts: o, oneQueryBatches: &atomic.Bool{}, lost: &atomic.Int64{}, dropped: &atomic.Int64{},
		failed: &atomic.Int64{}}
	l.oneQueryBatches.Store(simpleProtocol(conn))
	if _, ok := conn.(pgx.Tx); ok {
		l.inTx, l.order = true, &txOrder{}
		return l
	}
	if oneConnection(conn) {
		return l // nothing combined, Local limits decided in the database, give-backs on the caller's goroutine
	}
	l.unheld = newBacklog(unheldAtOnce(conn), runGiveBack, l.dropGiveBack)
	if o.combineBatch > 0 {
		l.reserves = newCombiner(o.combineBatch, o.combineInFlight, l.reserveBatch, l.releaseAbandoned)
		// A statement of settleChunk rows at most (see there).
		l.settles = newCombiner(o.combineBatch, o.combineInFlight, l.settleBatch, nil).weighed(settleChunk, (*settleRequest).rows)
		l.reserves.leftGrace, l.settles.leftGrace = o.leftGrace, o.leftGrace
		l.reserves.dropped = func(Grant) { l.countDropped() }
	}
	l.allot = newAllotments(l, o.allot)
	l.admitted = l.allot
	return l
}

// oneConnection reports whether conn is a single connection, which runs
// one statement at a time: a *pgx.Conn, a pool's *pgxpool.Conn, a pgx.Tx,
// or an Executor of one's own that embeds one, told by their methods
// Config() *pgx.ConnConfig and Conn() *pgx.Conn where execMode finds them
// (shownConn: in conn, else in what it embeds, since a wrapper's field
// named Conn hides the Conn method). Statements sent off the caller's path
// would run on it alongside the caller's own ("conn busy", pgx's state
// raced, statements crossed): the blocks of Local limits, taken ahead,
// reported and returned so, and combined statements, which run on when
// their callers leave. There, nothing is combined (each call returns once
// its statement is answered) and Local limits are decided in the database,
// as inside a caller's transaction.
func oneConnection(conn Executor) bool {
	v, ok := shownConn(conn)
	return ok && !v.Type().Implements(poolConfigType)
}

// WithTx returns a Limiter that runs every operation inside tx, the caller's
// transaction: admission then commits or rolls back with the caller's own
// writes. Use one such Limiter per transaction, and keep the transaction
// short: the row and advisory locks its operations take are held until tx
// ends. Windows are chosen on the database's now(), which in tx is when tx
// began: a Reserve in tx counts in the windows tx began in, however long
// it has been open since. One open longer than Prune's retention may count
// in a window whose counter Prune deleted, which starts again empty for it
// (its limit granted once more).
//
// tx must be READ COMMITTED: in another level Reserve, CreateTask,
// FinishTask and CancelTask refuse with ErrIsolation (the others do not
// check it).
// Several operations may share tx only in the global lock order —
// counters, then concurrency scopes, then queue scopes, then rows — for
// example Reserve then CreateTask, but not Reserve twice or CreateTask then
// Reserve, nor FinishTask twice (each holds its task row FOR UPDATE, which a combined
// admission naming both tasks waits for in its own order); an operation
// out of order is refused with a *LockOrderError before it runs, since it
// could deadlock with other transactions. Housekeeping (Recover, Prune,
// Doctor) is not a Limiter's: it runs its own transactions, on a
// Maintenance built from a pool.
//
// What tx does not hold, tx's rollback does not undo: a Local reservation
// (admitted outside tx, by this Limiter) that Commit or Release settles
// through the returned Limiter settles in this process's memory at once,
// as it does outside. When tx rolls back, the grant's rows are open again
// but its Local reservations stay settled as that call left them: a
// settle after the rollback settles the rows and reports the Local ones
// with Settled false, charged as the first call said (once, never twice).
//
// WithTx of a Limiter not made with New (a zero or nil one) returns it
// as it is: its operations fail as the Limiter's do. A nil tx makes every
// operation fail with a *ValidationError on "tx", as a nil conn does New's.
func (l *Limiter) WithTx(tx pgx.Tx) *Limiter {
	if l.usable() != nil { // its operations fail as l's do
		return l
	}
	c := *l
	c.conn = orNoConn(tx, "tx")
	c.inTx = true
	c.order = &txOrder{}
	c.reserves, c.settles = nil, nil // a transaction's statements run one at a time, in its order
	c.allot = nil                    // and Local limits are decided in it, like any other (admitted stays: see settle)
	c.unheld = nil                   // nor does anything run beside them (giveBackUnheld)
	return &c
}

// Option configures a Limiter.
type Option func(*options)

type options struct {
	combineBatch    int // 0: no combining
	combineInFlight int
	allot           AllotmentOptions
	clock           clock
	lockPrefix      int32
	coldBatches     bool                 // test-only: no batch goes as a hot batch (WithoutHotBatches)
	wallClock       func() time.Time     // test-only: this host's wall clock (WithWallClock); nil: time.Now
	dbClockStep     func() time.Duration // test-only (WithDBClockStep): added to each db_now a block statement reads
	leftGrace       time.Duration        // test-only (WithLeftStatementGrace); leftStatementGrace
	blockAdmissions int                  // test-only (WithBlockAdmissions); 0: maxBlockAdmissions
	unheldTry       func()               // test-only (WithUnheldTryHook): called before each try of retryUnheld
	housekeepHook   func()               // test-only (WithHousekeepHook): called by each housekeeping round before it collects blocks
	cancelBatchHook func()               // test-only (WithCancelTaskBatchHook): called by CancelTask once its batch is answered
	finishPlanHook  func()               // test-only (WithFinishTaskHooks): called by FinishTask between its plan and its batch
	finishBatchHook func()               // test-only (WithFinishTaskHooks): called by FinishTask once its batch is answered
	stuckAfter      time.Duration        // test-only (WithStuckAfter); 0: allotStuckAfter
}

func defaultOptions() options {
	return options{combineBatch: DefaultCombineBatch, combineInFlight: DefaultCombineInFlight, leftGrace: leftStatementGrace}
}

// Defaults of WithCombining.
const (
	DefaultCombineBatch    = 128
	DefaultCombineInFlight = 1
)

// WithCombining sets how concurrent calls of this Limiter are combined
// (combining is on by default): Reserve calls that arrive while
// maxInFlight combined Reserve statements are running wait and go together,
// at most maxBatch in one statement and one transaction; Commit and Release
// calls likewise, in statements of their own, each of 256 reservations and
// leases at most (a call with more goes alone). Each caller still gets its
// own Grant, Settlement or error; a caller alone is sent at once. A
// statement whose callers have all left stops counting against
// maxInFlight (see Reserve on cancelling). Without the option, maxBatch is
// DefaultCombineBatch and maxInFlight DefaultCombineInFlight. Values below
// 1 mean 1, and a maxBatch above math.MaxInt32 is math.MaxInt32.
func WithCombining(maxBatch, maxInFlight int) Option {
	return func(o *options) {
		o.combineBatch = min(max(maxBatch, 1), math.MaxInt32)
		o.combineInFlight = max(maxInFlight, 1)
	}
}

// WithoutCombining sends every Reserve, Commit and Release as its own
// statement and transaction, as inside a caller's transaction.
func WithoutCombining() Option {
	return func(o *options) { o.combineBatch = 0 }
}

// WithAdvisoryLockPrefix makes the advisory locks that serialize task
// creation on a queue scope use keys with prefix in their upper 32 bits
// and a hash of the scope in the lower 32, as River's AdvisoryLockPrefix
// does: advisory locks share one 64-bit key space per database, so a host
// application can keep its own keys apart from pgadmit's by giving pgadmit
// a prefix of its own. 0, the default, keeps pgadmit's 64-bit hashed keys.
// Every process creating tasks in one database must use the same prefix,
// or queue_size limits are no longer exact.
//
// The advisory locks of concurrency scopes, taken inside the function
// pgadmit_reserve (and by RenewLeases, which must match them), and the
// task fences, which an admission for a task takes shared and FinishTask
// and CancelTask exclusively, keep their 64-bit hashed keys
// ('pgadmit/concurrent/...', 'pgadmit/task/...') whatever the prefix.
// Maintenance and migrations take no advisory locks: they use lease rows.
func WithAdvisoryLockPrefix(prefix int32) Option {
	return func(o *options) { o.lockPrefix = prefix }
}

// Defaults applied when a Limit leaves them zero.
const (
	DefaultWindow   = 60 * time.Second
	DefaultLeaseTTL = 120 * time.Second
)
