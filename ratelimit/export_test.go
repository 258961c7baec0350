package ratelimit

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// BatchRequest is one admission of a combined Reserve, for tests.
type BatchRequest struct {
	TaskID, AttemptID string
	Limits            []Limit
}

// ReserveCombined decides requests in one call, exactly as the combiner
// sends concurrent Reserve calls, and returns a grant or an error for each.
func (l *Limiter) ReserveCombined(ctx context.Context, reqs []BatchRequest) ([]Grant, []error, error) {
	batch := make([]*admission, len(reqs))
	for i, r := range reqs {
		a, err := newAdmission(r.TaskID, r.AttemptID, r.Limits)
		if err != nil {
			return nil, nil, err
		}
		batch[i] = &a
	}
	var grants []Grant
	var errs []error
	err := runCounted(ctx, l.reserves, len(batch), func(ctx context.Context) (err error) {
		grants, errs, err = l.reserveBatch(ctx, batch)
		return err
	})
	return grants, errs, err
}

// CommitCombined commits grants in one call, as the combiner sends
// concurrent Commit calls (each with the estimate as its actual amount).
func (l *Limiter) CommitCombined(ctx context.Context, grants []Grant) ([]Settlement, error) {
	batch := make([]*settleRequest, len(grants))
	for i, g := range grants {
		amounts := make([]float64, len(g.Reservations))
		for j, r := range g.Reservations {
			amounts[j] = r.Amount
		}
		req, err := newSettleRequest(g, StatusCommitted, reasonCommitted, amounts, nil)
		if err != nil {
			return nil, err
		}
		batch[i] = &req
	}
	var out []Settlement
	err := runCounted(ctx, l.settles, len(batch), func(ctx context.Context) (err error) {
		out, _, err = l.settleBatch(ctx, batch)
		return err
	})
	return out, err
}

// runCounted runs a batch of n requests as c's runBatch does, so that c
// counts its statement (and whether it went hot) in Stats; c may be nil.
func runCounted[Req, Res any](ctx context.Context, c *combiner[Req, Res], n int, run func(context.Context) error) error {
	var hot atomic.Bool
	start := time.Now()
	err := run(context.WithValue(ctx, hotMarkKey{}, &hot))
	if c != nil {
		c.answered(nil, n, 0, time.Since(start), hot.Load()) // no call of it waited in c
	}
	return err
}

// Test-only hooks. Statements that take an optional now (NULL: the
// database's now()) get one from these clocks instead, so tests drive time
// instead of sleeping until a lease or a window ends. Production code has
// no way to set them: every time there comes from the database.

// WithClock makes the Limiter's task, lease and check statements read now
// from now(). Reserve, Commit and Release still use the database's clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock = now }
}

// WithoutHotBatches sends every combined batch as a function call, even
// one on a hot counter, so that tests can compare the two paths.
func WithoutHotBatches() Option {
	return func(o *options) { o.coldBatches = true }
}

// WithLeftStatementGrace sets how long a statement whose callers have all
// left may still run before it is cancelled (leftStatementGrace), so that
// tests can hold a statement's answer back longer than that.
func WithLeftStatementGrace(d time.Duration) Option {
	return func(o *options) { o.leftGrace = d }
}

// WithBlockAdmissions sets how many requests a block of a Local limit
// admits at most (maxBlockAdmissions), so that tests can reach it.
func WithBlockAdmissions(n int) Option {
	return func(o *options) { o.blockAdmissions = n }
}

// WithWallClock makes the Limiter's blocks of Local limits read this host's
// wall clock from now() (its monotonic clock stays the real one), so that
// tests can make the host seem to have slept.
func WithWallClock(now func() time.Time) Option {
	return func(o *options) { o.wallClock = now }
}

// WithDBClockStep adds step() to each reading of the database's clock
// that the Limiter's blocks of Local limits take (db_now of AllotmentTake
// and AllotmentSync), so that tests can make the database's clock seem to
// step (an NTP step on its host, a failover to a replica ahead).
func WithDBClockStep(step func() time.Duration) Option {
	return func(o *options) { o.dbClockStep = step }
}

// WithStuckAfter sets how long after its window's end a block waits for
// the requests it admitted that are still in flight (allotStuckAfter), so
// that tests need not wait a minute.
func WithStuckAfter(d time.Duration) Option {
	return func(o *options) { o.stuckAfter = d }
}

// WithHousekeepHook calls hook in each round of the housekeeping of Local
// blocks, after it listed the counters and before it collects their
// blocks, so that tests can act while a round is under way (a round
// delayed there, by the scheduler or a GC pause, say).
func WithHousekeepHook(hook func()) Option {
	return func(o *options) { o.housekeepHook = hook }
}

// WithCancelTaskBatchHook makes CancelTask call hook once its batch (the
// second round trip) is answered, before it reads the answers, so that a
// test can change the task between the batch and the answer.
func WithCancelTaskBatchHook(hook func()) Option {
	return func(o *options) { o.cancelBatchHook = hook }
}

// WithFinishTaskHooks makes FinishTask call afterPlan once its first read
// saw the task running under the token, before its batch, and afterBatch
// once its batch is answered, before it reads the answers, so that a test
// can change the task in between. Either may be nil.
func WithFinishTaskHooks(afterPlan, afterBatch func()) Option {
	return func(o *options) { o.finishPlanHook, o.finishBatchHook = afterPlan, afterBatch }
}

// WithMaintenanceClock makes Recover, Prune and Doctor, and their leases,
// read now from now().
func WithMaintenanceClock(now func() time.Time) MaintenanceOption {
	return func(o *maintenanceOptions) { o.clock = now }
}

// QueuedReserves is how many Reserve calls wait in the combiner's queue.
func (l *Limiter) QueuedReserves() int {
	l.reserves.mu.Lock()
	defer l.reserves.mu.Unlock()
	return len(l.reserves.queue)
}

// QueueUnnoticedReserve queues a Reserve of limits for ctx in l's
// combiner as do queues a caller's, with no goroutine waiting on it: a
// caller whose ctx has ended and whose goroutine has not run since to
// withdraw its request when the batch is taken.
func (l *Limiter) QueueUnnoticedReserve(ctx context.Context, limits []Limit) error {
	a, err := newAdmission("", "", limits)
	if err != nil {
		return err
	}
	l.reserves.mu.Lock()
	defer l.reserves.mu.Unlock()
	l.reserves.queue = append(l.reserves.queue, &combined[*admission, Grant]{req: &a, ctx: ctx, done: make(chan struct{})})
	l.reserves.waiting++
	return nil
}

// ReservesInFlight is how many in-flight places of the Reserve combiner
// are taken (see combiner.inFlight).
func (l *Limiter) ReservesInFlight() int {
	l.reserves.mu.Lock()
	defer l.reserves.mu.Unlock()
	return l.reserves.inFlight
}

// AllotmentSets is how many counters l keeps blocks, or their rate, of.
func (l *Limiter) AllotmentSets() int {
	l.allot.mu.Lock()
	defer l.allot.mu.Unlock()
	return len(l.allot.sets)
}

// QueuedSettles is how many Commit and Release calls wait in the
// combiner's queue.
func (l *Limiter) QueuedSettles() int {
	l.settles.mu.Lock()
	defer l.settles.mu.Unlock()
	return len(l.settles.queue)
}

// DBClock is l's estimate of the database's clock, and whether l has read
// that clock yet, so that a test can wait for a sync to read it.
func (l *Limiter) DBClock() (time.Time, bool) { return l.allot.dbClock() }

// LocalAdmissionsKept is how many Local admissions l keeps for settling
// copies of their grants (see Reservation.LocalID).
func (l *Limiter) LocalAdmissionsKept() int {
	n := 0
	for _, s := range l.allot.snapshot() {
		s.mu.Lock()
		for _, b := range s.open() {
			n += len(b.admissions)
		}
		s.mu.Unlock()
	}
	return n
}

// AfterReserveStatements makes each statement of l's Reserve combiner call
// hook, with how many requests it carried, once it is answered and before
// its callers are, so that a test can hold an answer back there as long as
// it needs. Call it before l's first Reserve.
func (l *Limiter) AfterReserveStatements(hook func(requests int)) {
	run := l.reserves.run
	l.reserves.run = func(ctx context.Context, reqs []*admission) ([]Grant, []error, error) {
		grants, errs, err := run(ctx, reqs)
		hook(len(reqs))
		return grants, errs, err
	}
}

// ReleaseUnheld gives back g as a grant nobody holds (releaseUnheld),
// retrying as that does, and returns once it gave up or succeeded.
func (l *Limiter) ReleaseUnheld(g Grant) { l.releaseUnheld(g, reasonAbandoned, time.Now()) }

// WithUnheldTryHook makes retryUnheld call hook before each of its tries
// (of releaseUnheld, ReleaseUnheld, ...), on the goroutine that gives back,
// so that a test can count the tries of the real give-back.
func WithUnheldTryHook(hook func()) Option {
	return func(o *options) { o.unheldTry = hook }
}

// RetryUnheld is retryUnheld, for tests.
func (l *Limiter) RetryUnheld(giveBack func(context.Context) error) {
	l.retryUnheld(time.Now(), giveBack)
}

// UnheldReleaseSpan is how long retryUnheld tries.
const UnheldReleaseSpan = unheldReleaseSpan

// LockTimeoutsSet reads back the lock_timeout, in milliseconds, that m sets for a statement of
// a step or of Doctor (lockConn: in the statement's batch, or in a transaction of its own in
// the exec modes that prepare first), and in a transaction of its own (boundTx), for tests.
func (m *Maintenance) LockTimeoutsSet(ctx context.Context) (statement, tx int64, err error) {
	if err := m.usable(); err != nil {
		return 0, 0, err
	}
	q := dbtest.New()
	if statement, err = q.OpsLockTimeoutMillis(ctx, m.stepConn()); err != nil {
		return 0, 0, err
	}
	t, err := m.pool.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = t.Rollback(ctx) }()
	if err := m.boundTx(ctx, t); err != nil {
		return 0, 0, err
	}
	tx, err = q.OpsLockTimeoutMillis(ctx, t)
	return statement, tx, err
}

// DoctorJIT reads back jit as Doctor's statement runs with it (sent as
// Doctor's is, doctorConn), for tests.
func (m *Maintenance) DoctorJIT(ctx context.Context) (string, error) {
	if err := m.usable(); err != nil {
		return "", err
	}
	return dbtest.New().OpsCurrentJIT(ctx, m.doctorConn())
}

// TouchAllotmentSets makes l keep the state of n counters of Local limits
// (tokens of model keyPrefix0 ... keyPrefix(n-1), one-second windows), as a
// request on each would that then took no block (its window about to end,
// say): a burst of keys, with no statement sent.
func (l *Limiter) TouchAllotmentSets(keyPrefix string, n int) {
	for i := range n {
		l.allot.set(counterKey{scopeType: "model", scopeKey: keyPrefix + strconv.Itoa(i), metric: MetricTokens, windowSeconds: 1})
	}
}

// GivingBackAtOnce is how many give-backs of what Reserve granted callers
// who left run at once on a Limiter combining maxBatch calls a statement,
// maxInFlight statements at once.
func GivingBackAtOnce(maxBatch, maxInFlight int) int { return givingBackAtOnce(maxBatch, maxInFlight) }

// WrapDBError is what the operations make of a database error (op names
// the operation), for tests.
func WrapDBError(ctx context.Context, op string, err error) error { return wrapDBError(ctx, op, err) }

// GiveBackUnheldInBackground hands giveBack to l's background give-backs
// (giveBackUnheld), tried as retryUnheld tries, timed from now, for tests.
func (l *Limiter) GiveBackUnheldInBackground(giveBack func(context.Context) error) {
	l.giveBackUnheld(func(handedOver time.Time) { l.retryUnheld(handedOver, giveBack) })
}

// QueuedAtMost is how many give-backs wait their turn, at most, behind
// most running at once (queuedAtMost); one more drops the oldest.
func QueuedAtMost(most int) int { return queuedAtMost(most) }

// ReleaseIfEndedUnread releases the open reservations of the task taskID,
// if it has ended, once unread is closed, as FinishTask and CancelTask do
// when pgx gave their batch's connection up unread (releaseIfEndedUnread),
// for tests.
func (l *Limiter) ReleaseIfEndedUnread(unread <-chan struct{}, taskID string) error {
	id, err := parseID("taskID", taskID)
	if err != nil {
		return err
	}
	l.releaseIfEndedUnread(unread, id, nil)
	return nil
}

// DescribedSteps are the steps that the line of a run of job ("recover" or
// "prune", with a task retention) knows feed its counts (the clauses of its
// result), in no order, for tests.
func DescribedSteps(job string) []string {
	var clauses []clause
	switch job {
	case jobRecover:
		clauses = RecoveryResult{}.clauses()
	case jobPrune:
		clauses = PruneResult{TaskCutoff: time.Now()}.clauses()
	}
	var known []string
	for _, c := range clauses {
		for _, t := range c.tallies {
			for _, s := range t.steps {
				if !slices.Contains(known, s) {
					known = append(known, s)
				}
			}
		}
	}
	return known
}
