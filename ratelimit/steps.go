package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/internal/locktimeout"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/internal/poolerr"
)

// Recover and Prune work as a list of steps, each repeated in bounded
// batches (one short transaction each) until a batch finds nothing more.

// step is one kind of work; run does one batch.
type step struct {
	name string
	run  batchFunc
}

// batchFunc does one batch of a step and reports whether there may be more,
// and whether the batch was done: it committed, or it read that there was
// nothing to do. A batch that rolled back whole (it timed out on a lock,
// say) was not, though its step goes on. Called with a stop error (ctx
// done, the run's lease lost), it does no batch and ends the step with stop
// and what the step had left so far (findStep).
type batchFunc func(stop error) (more, done bool, err error)

// runSteps runs every step to completion, in order. A step that ends with
// an error the server raised is left there and the next one runs: the
// steps are independent, and one bad row (a counter the doctor would
// report damaged, say) must not stop the rest of the work. (Steps that act
// on rows they found also go on past such a row within the step: see
// findStep.) The failed steps' errors come back joined. It stops at once on
// any other error (the connection lost), when ctx is done, or when the
// run's lease is lost: before each batch it calls keep, which renews the
// lease or says it was lost; the step it stops in still reports what it had
// left. After each batch that was done (batchFunc), even one whose step
// ends with an error, it calls progress (when not nil) with the step's name
// and the names of the steps that failed so far (this one too, when this
// batch ended it with an error).
// Each failed step's error is a *StepError naming it, and the one the run
// stopped at the steps it did not reach.
func runSteps(ctx context.Context, op string, lease *jobLease, steps []step, progress func(step string, failed []string)) error {
	var failed []error
	var failedNames []string // of failed's steps
	for i, s := range steps {
		failure := func(err error) *StepError {
			return &StepError{Job: op, Step: s.name, Err: stepError(ctx, op, s.name, lease.m.opts.lockTimeout, err)}
		}
		// stopped ends the run at s, which failed with err.
		stopped := func(err error) error {
			se := failure(err)
			for _, later := range steps[i+1:] {
				se.NotRun = append(se.NotRun, later.name)
			}
			return errors.Join(append(failed, se)...)
		}
		for more := true; more; {
			stop := ctx.Err()
			if stop == nil {
				stop = lease.keep(ctx)
			}
			if stop != nil {
				_, _, err := s.run(stop) // with what the step left so far
				return stopped(err)
			}
			var done bool
			var err error
			more, done, err = s.run(nil)
			if done && progress != nil {
				names := failedNames
				if err != nil {
					names = append(slices.Clip(names), s.name)
				}
				progress(s.name, names)
			}
			if err != nil {
				if ctx.Err() != nil {
					// Cut off by ctx (on a pool set up with ConfigurePool, the server
					// answered its cancel request with 57014, an error it raised).
					return stopped(err)
				}
				if !rejectedByServer(batchErr(err)) {
					return stopped(err) // the connection or the server is in trouble: so would every next step be
				}
				failed, failedNames = append(failed, failure(err)), append(failedNames, s.name)
				break
			}
		}
	}
	return errors.Join(failed...)
}

// stepError is the error of step s of op, which ended with err: the
// server's error made what wrapDBError makes of it, and named. Of a step
// cut short each part is made so on its own, so that what the step left
// before (a row rejected for a missing task, say) does not make the error
// that cut it off read as that. bound is the lock_timeout the step's
// statements ran with (WithMaintenanceLockTimeout's).
func stepError(ctx context.Context, op, s string, bound time.Duration, err error) error {
	var c *cutShort
	if errors.As(err, &c) {
		return &cutShort{err: stepError(ctx, op, s, bound, c.err), left: stepError(ctx, op, s, bound, c.left)}
	}
	return wrapDBError(ctx, op+": "+s, lockWait(op, s, bound, err))
}

// lockWait names op, step and bound (the bound its statements ran with,
// as lock_timeout was set to it: rounded up to a whole millisecond, capped
// at lock_timeout's range) in the *LockWaitError that err holds, or makes
// err one when the server gave up waiting for a lock on the step's single
// statement (the rest of the step is left); other errors pass unchanged.
func lockWait(op, step string, bound time.Duration, err error) error {
	bound = locktimeout.Applied(bound)
	var lw *LockWaitError
	if errors.As(err, &lw) {
		lw.Job, lw.Step, lw.Bound = op, step, bound
		return err
	}
	if lockNotAvailable(err) {
		return &LockWaitError{Job: op, Step: step, Bound: bound, Rest: true, Err: err}
	}
	return err
}

// maxLockWaits is how many batches a step lets time out on a lock (each
// after WithMaintenanceLockTimeout) before it leaves the rest to a later
// run: a transaction that holds one counter may hold the rows of many
// batches, and every wait costs the whole bound.
const maxLockWaits = 2

// rowsStep runs one bounded single-statement batch and adds the rows it
// changed to *count; there is more to do while batches come back full.
func rowsStep(batch int32, stmt func(batch int32) (int64, error), count *int64) batchFunc {
	return func(stop error) (bool, bool, error) {
		if stop != nil {
			return false, false, stop
		}
		n, err := stmt(batch)
		if err != nil {
			return false, false, err
		}
		*count += n
		return n == int64(batch), true, nil
	}
}

// findStep finds, per batch, up to batch rows to act on and acts on them,
// all in one statement or transaction while the server accepts it (see
// isolate). act counts what it changed in the caller's result and returns
// how many rows it changed. A row the server rejects on its own (one whose
// counter was damaged by hand, say) is set aside for the rest of the step,
// so the rows around it are still done; the step then ends with the
// server's reason (after a batch's worth of such rows, or a batch of which
// it rejects every row, it stops, and says when it left the rest). So are
// the rows of a batch that timed out waiting for a lock
// (WithMaintenanceLockTimeout), up to maxLockWaits such batches, after
// which the step leaves the rest too; it then ends with a
// *LockWaitError counting them (and Rest when it left more). passed, when
// not nil, holds the rows that earlier steps of the run left so, which this
// step passes over too (their lock was held past the bound a moment ago:
// waiting for it again would cost the bound again), and takes the rows this
// one leaves so, for the steps after it. A batch that
// fails otherwise (the connection lost, ctx done) ends the step with its
// error and, beside it, what the step had left so far (cutShort); so does
// a run that stops between its batches (batchFunc's stop). id names a row
// across batches.
func findStep[T any](batch int32, passed map[[16]byte]bool, id func(T) [16]byte, find func(batch int32) ([]T, error), act func([]T) (int64, error)) batchFunc {
	return findHeldStep(batch, passed, id, find, act, nil)
}

// findHeldStep is findStep whose batches that time out on a lock are
// retried without the rows whose lock held finds still held (see isolate);
// held nil: none are.
func findHeldStep[T any](batch int32, passed map[[16]byte]bool, id func(T) [16]byte, find func(batch int32) ([]T, error), act func([]T) (int64, error), held func([]T) ([]T, error)) batchFunc {
	aside := map[[16]byte]bool{}  // rows the server rejected on their own
	var reason error              // and its first reason
	waited := map[[16]byte]bool{} // rows of batches that timed out on a lock
	var waitErr error             // and the first such error
	waits := 0
	rest := false // the step stopped with rows it did not reach (both errors say so)
	left := func() error {
		var errs []error
		if reason != nil {
			what := plural.Count(len(aside), "row", "rows") + " the server rejected"
			if rest {
				what += " and the rest of the step"
			}
			errs = append(errs, fmt.Errorf("left %s: %w", what, reason))
		}
		if waitErr != nil {
			errs = append(errs, &LockWaitError{Rows: len(waited), Rest: rest, Err: waitErr})
		}
		return errors.Join(errs...)
	}
	// done: whether the batch committed (or found nothing to do).
	end := func(done bool) (bool, bool, error) { return false, done, left() }
	// cut ends the step at err, which a batch met, keeping what the
	// batches before it left.
	cut := func(done bool, err error) (bool, bool, error) {
		if l := left(); l != nil {
			return false, done, &cutShort{err: err, left: l}
		}
		return false, done, err
	}
	return func(stop error) (bool, bool, error) {
		if stop != nil {
			return cut(false, stop)
		}
		// Ask for the rows set aside or passed over too: find returns them
		// again (those of passed it may not: then todo may come out longer
		// than a batch, and is cut to one).
		asked := int(batch) + len(aside) + len(waited) + len(passed)
		found, err := find(int32(min(asked, math.MaxInt32)))
		if err != nil {
			return cut(false, err)
		}
		full := len(found) == asked
		todo := slices.DeleteFunc(found, func(row T) bool { return aside[id(row)] || waited[id(row)] || passed[id(row)] })
		if len(todo) == 0 {
			return end(true)
		}
		if len(todo) > int(batch) {
			todo, full = todo[:batch], true
		}
		done, err := isolate(todo, act, held, id)
		for _, row := range done.rejected {
			aside[id(row)] = true
		}
		if reason == nil {
			reason = done.reason
		}
		for _, row := range done.locked {
			waited[id(row)] = true
			if passed != nil {
				passed[id(row)] = true
			}
		}
		if done.lockErr != nil {
			waits++
			if waitErr == nil {
				waitErr = done.lockErr
			}
		}
		if err != nil {
			return cut(done.committed, err) // with what the parts of this batch before it left
		}
		switch {
		case done.changed == 0 && len(done.rejected) == len(todo):
			rest = full                // a full batch: there may be more
			return end(done.committed) // the server rejects every row: not one bad row, so stop here
		case len(aside) >= int(batch):
			rest = full
			return end(done.committed) // a batch's worth set aside: leave the rest to a later run
		case waits >= maxLockWaits:
			rest = full
			return end(done.committed) // the rest may wait on the same lock: leave it to a later run
		case !full || done.changed == 0 && len(done.rejected) == 0 && len(done.locked) == 0:
			// The last batch; or a full one of which nothing changed: others
			// got to those rows meanwhile, so stop rather than spin.
			return end(done.committed)
		}
		return true, done.committed, nil
	}
}

// cutShort is the error of a step that findStep ended at err, met by a
// batch, after its batches had left rows (left: what end would have
// reported). err alone decides what the run does next (runSteps); both are
// in its chain, err first.
type cutShort struct {
	err, left error
}

func (e *cutShort) Error() string   { return e.err.Error() + "\n" + e.left.Error() }
func (e *cutShort) Unwrap() []error { return []error{e.err, e.left} }

// batchErr is the error that ended a step's batch: err, or the one that
// cut a findStep short.
func batchErr(err error) error {
	var c *cutShort
	if errors.As(err, &c) {
		return c.err
	}
	return err
}

// isolated is what isolate did: the rows changed, the rows the server
// rejected on their own with its first reason, and the rows of a part that
// timed out waiting for a lock, with the server's error.
type isolated[T any] struct {
	changed   int64
	committed bool // some part committed
	rejected  []T
	reason    error
	locked    []T
	lockErr   error
}

// isolate acts on items as one group. When the server rejects the group for
// what it was sent (rejectedInput: a check a row broke, say), it acts on
// each half in turn, down to single rows, so that only the rows the server
// rejects on their own are left out: one bad row costs about two statements
// per halving, and the normal case one. Any other error ends it at once:
// the connection lost, ctx done, or one that no row causes (a deadlock),
// which halving would only meet again, up to twice per row. A part that
// timed out waiting for a lock (55P03) is not halved: each half would wait
// out the bound again. It is left whole, unless held (when not nil) finds
// the rows of it whose lock another transaction still holds, without
// waiting: those are left, and the rest is tried once more (once per
// call: each try may wait out the bound again). One counter held by a
// transaction left idle used to cost every row of its batch.
func isolate[T any](items []T, act func([]T) (int64, error), held func([]T) ([]T, error), id func(T) [16]byte) (isolated[T], error) {
	var out isolated[T]
	var try func([]T) error
	lockWait := func(part []T, err error) {
		out.locked = append(out.locked, part...)
		if out.lockErr == nil {
			out.lockErr = err
		}
	}
	try = func(part []T) error {
		n, err := act(part)
		switch {
		case err == nil:
			out.changed += n
			out.committed = true
			return nil
		case lockNotAvailable(err):
			if held == nil || len(part) == 1 {
				lockWait(part, err)
				return nil
			}
			h, herr := held(part)
			if herr != nil && !lockNotAvailable(herr) {
				return herr
			}
			if herr != nil || len(h) == 0 || len(h) == len(part) {
				lockWait(part, err) // not a row lock it can see (a table's, say), or every row's
				return nil
			}
			lockWait(h, err)
			held = nil // one retry per call
			left := map[[16]byte]bool{}
			for _, row := range h {
				left[id(row)] = true
			}
			return try(slices.DeleteFunc(slices.Clone(part), func(row T) bool { return left[id(row)] }))
		case !rejectedInput(err):
			return err
		case len(part) == 1:
			out.rejected = append(out.rejected, part[0])
			if out.reason == nil {
				out.reason = err
			}
			return nil
		}
		half := len(part) / 2
		if err := try(part[:half]); err != nil {
			return err
		}
		return try(part[half:])
	}
	return out, try(items)
}

// releaseStep releases, per batch, the open reservations that find selects
// (reason on each), in one call of pgadmit_settle (which locks their
// counters first, the lock order), and adds how many it released to *count.
// passed: the reservations that earlier steps left on a lock wait, shared
// with later steps (see findStep), or nil. A batch is settleChunk
// reservations at most, whatever batch says (see there: the chunk bounds
// how long one statement holds its counters' locks).
func (m *Maintenance) releaseStep(ctx context.Context, batch int32, passed map[[16]byte]bool, find func(batch int32) ([]pgtype.UUID, error), reason string, count *int64) batchFunc {
	return findHeldStep(min(batch, settleChunk), passed, uuidBytes, find, func(ids []pgtype.UUID) (int64, error) {
		p := releaseIDs(ids, reason)
		p.Now = m.opts.clock.at()
		settled, err := m.queries.AdmissionSettle(ctx, m.stepConn(), p)
		if err != nil {
			return 0, err
		}
		n := settledCount(settled)
		*count += n
		return n, nil
	}, m.heldReservations(ctx))
}

// heldReservations finds, of the given open reservations, those whose
// counter another transaction holds locked now (isolate's held).
func (m *Maintenance) heldReservations(ctx context.Context) func([]pgtype.UUID) ([]pgtype.UUID, error) {
	return func(ids []pgtype.UUID) ([]pgtype.UUID, error) {
		return m.queries.CounterFindHeldForReservations(ctx, m.stepConn(), ids)
	}
}

// keysetStep walks a table in bounded pages from the start of its key
// order: page reads the next page after its own last position and reports
// how many rows it read; there is more while pages come back full.
func keysetStep(batch int32, page func(batch int32) (scanned int32, err error)) batchFunc {
	return func(stop error) (bool, bool, error) {
		if stop != nil {
			return false, false, stop
		}
		n, err := page(batch)
		if err != nil {
			return false, false, err
		}
		return n == batch, true, nil
	}
}

// uuidBytes names a row by its uuid.
func uuidBytes(id pgtype.UUID) [16]byte { return id.Bytes }

// rejectedByServer reports an error the server raised about a statement
// (which rolled back alone), as opposed to one of the connection or the
// client. A server's refusal of a session (a connect error: "the database
// system is starting up", too many connections) and the errors of a server
// in trouble (classes 08 connection, 53 resources, 57 operator
// intervention such as admin_shutdown, 58 system) are the server's words
// but not about the statement: every next step would meet them too. A
// statement-pooling proxy's refusal of a transaction block (FATAL 08P01) is
// about the step: the steps of single statements still run (README).
func rejectedByServer(err error) bool {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &pgErr) || errors.As(err, &connectErr) {
		return false
	}
	switch {
	case pgErr.Code == "57014": // query_canceled: statement_timeout, a cancel request
		return true
	case poolerr.StatementPooling(err):
		return true
	case len(pgErr.Code) != 5:
		return true
	}
	switch pgErr.Code[:2] {
	case "08", "53", "57", "58":
		return false
	}
	return true
}
