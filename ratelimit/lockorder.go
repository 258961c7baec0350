package ratelimit

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Every transaction takes pgadmit's locks in one global order, which is what
// makes admissions deadlock-free: counter rows (sorted by primary key), then
// advisory locks of concurrency scopes, then advisory locks of queue scopes
// (each sorted by key), then other rows (several leases in id order: see
// idOrder). One operation follows the order by itself; several operations
// in one caller's transaction follow it only if each starts past where the
// previous one ended. lockPhase names the steps.
type lockPhase int

const (
	phaseNone        lockPhase = iota
	phaseCounters              // counter rows, FOR UPDATE
	phaseLeaseScopes           // advisory locks of concurrency scopes
	phaseQueueScopes           // advisory locks of queue scopes
	phaseRows                  // task, attempt, reservation, lease and event rows
)

// counterKey names a window counter without its window start.
type counterKey struct {
	scopeType, scopeKey, metric string
	windowSeconds               int32
}

// compare orders counters as their primary key does, which is the order
// counter rows are locked in: scope type, scope key and metric in byte
// order (COLLATE "C"), then window length.
func (a counterKey) compare(b counterKey) int {
	return cmp.Or(
		strings.Compare(a.scopeType, b.scopeType),
		strings.Compare(a.scopeKey, b.scopeKey),
		strings.Compare(a.metric, b.metric),
		cmp.Compare(a.windowSeconds, b.windowSeconds),
	)
}

// counter names the counter the reservation draws on (its window start
// apart).
func (r Reservation) counter() counterKey {
	return counterKey{r.ScopeType, r.ScopeKey, r.Metric, int32(r.Window / time.Second)}
}

// ErrLockOrder is matched by the *LockOrderError an operation returns when,
// inside a caller's transaction, it would take locks out of the global
// order after an earlier operation of the same transaction.
var ErrLockOrder = errors.New("ratelimit: operation out of lock order in this transaction")

// LockOrderError refuses an operation that, run after Previous in the same
// transaction, could deadlock with other transactions. Nothing was run. Run
// it in a transaction of its own, or before Previous. Find it with
// errors.As, or match it with errors.Is(err, ErrLockOrder).
type LockOrderError struct {
	// Op is the refused operation, by its method's name ("Reserve",
	// "FinishTask", ...).
	Op string
	// Previous is the earlier operation of the transaction whose locks Op
	// would have followed out of order.
	Previous string

	leases bool // refused for a lease below one Previous locked
}

// Error names both operations, why they could deadlock, and what to do
// instead (its Example's output):
//
//	ratelimit: Reserve after CreateTask in the same transaction could deadlock with other transactions (locks are taken counters, then concurrency scopes, then queue scopes, then rows): run it in its own transaction or before CreateTask
func (e *LockOrderError) Error() string {
	// One made by hand may name neither operation.
	op, previous := cmp.Or(e.Op, "an operation"), cmp.Or(e.Previous, "an earlier operation")
	if e.leases {
		return fmt.Sprintf("ratelimit: %s after %s in the same transaction could deadlock with other transactions "+
			"(several leases are locked in id order, and %s locked a lease whose id is above one %s locks): "+
			"run it in its own transaction or before %s", op, previous, previous, op, previous)
	}
	if locksTaskRow(e.Op) && locksTaskRow(e.Previous) {
		return fmt.Sprintf("ratelimit: %s after %s in the same transaction could deadlock with other transactions "+
			"(each holds its task row FOR UPDATE, which an admission naming both tasks waits for in its own order): "+
			"finish or cancel each task in its own transaction", op, previous)
	}
	return fmt.Sprintf("ratelimit: %s after %s in the same transaction could deadlock with other transactions "+
		"(locks are taken counters, then concurrency scopes, then queue scopes, then rows): run it in its own transaction or before %s",
		op, previous, previous)
}

// Is makes errors.Is(err, ErrLockOrder) true.
func (e *LockOrderError) Is(target error) bool { return target == ErrLockOrder }

// txOrder remembers how far in the lock order the operations of one caller's
// transaction have gone.
type txOrder struct {
	mu       sync.Mutex
	reached  lockPhase
	previous string
	// finished: a FinishTask or CancelTask of this transaction holds its
	// task row FOR UPDATE (TaskFinishLock) and its fence (TaskFenceLock).
	// Those wait for, and are waited for by, the FOR KEY SHARE that an
	// admission's inserts take on their tasks, in the admissions' order
	// (not a global one), and its fences: a combined batch for
	// two tasks, holding the second's row and waiting for the first's,
	// deadlocks with a transaction that finished the first and then
	// finishes the second. So a transaction finishes (or cancels) one task
	// at most.
	finished   bool
	finishedBy string // the operation that set finished
	// lease: the highest id of the leases this transaction's operations
	// locked, leaseBy the operation that locked it. Several leases are
	// locked in id order (idOrder); an operation that locks a lease below
	// it would wait for it holding the higher one, while a statement
	// locking both in id order (FinishTask of their task, a renewal) holds
	// the lower one and waits for the higher: a deadlock.
	lease   pgtype.UUID
	leaseBy string
}

// opFinishTask and opCancelTask name FinishTask and CancelTask in the lock
// order's bookkeeping.
const (
	opFinishTask = "FinishTask"
	opCancelTask = "CancelTask"
)

// locksTaskRow reports whether op holds its task row FOR UPDATE.
func locksTaskRow(op string) bool { return op == opFinishTask || op == opCancelTask }

// enter admits an operation whose locks span first..last, or refuses it.
// Outside a caller's transaction every operation is its own transaction and
// always follows the order. Row-level operations may follow each other: the
// global order does not rank rows against rows, except leases, several of
// which are locked in id order (enterLeases).
func (l *Limiter) enter(op string, first, last lockPhase) error {
	return l.enterLeases(op, first, last, nil)
}

// enterLeases is enter for an operation that also locks the given existing
// leases: refused when one of them is below a lease an earlier operation
// of the transaction locked (the lease lock order). FinishTask and
// CancelTask pass the task's live leases, which they lock after its row.
func (l *Limiter) enterLeases(op string, first, last lockPhase, leases []pgtype.UUID) error {
	if l.order == nil || first == phaseNone {
		return nil
	}
	o := l.order
	o.mu.Lock()
	defer o.mu.Unlock()
	if first <= o.reached && !(first == phaseRows && o.reached == phaseRows) {
		return &LockOrderError{Op: op, Previous: o.previous}
	}
	highest := o.lease
	for _, id := range leases {
		if o.lease.Valid && bytes.Compare(id.Bytes[:], o.lease.Bytes[:]) < 0 {
			return &LockOrderError{Op: op, Previous: o.leaseBy, leases: true}
		}
		if !highest.Valid || bytes.Compare(id.Bytes[:], highest.Bytes[:]) > 0 {
			highest = id
		}
	}
	if locksTaskRow(op) {
		if o.finished {
			return &LockOrderError{Op: op, Previous: o.finishedBy}
		}
		o.finished, o.finishedBy = true, op
	}
	if highest != o.lease {
		o.lease, o.leaseBy = highest, op
	}
	if last > o.reached {
		o.reached = last
	}
	o.previous = op
	return nil
}
