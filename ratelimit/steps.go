package ratelimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Recover and Prune work as a list of steps, each repeated in bounded
// batches (one short transaction each) until a batch finds nothing more.

// step is one kind of work; run does one batch and reports whether there may
// be more.
type step struct {
	name string
	run  func() (more bool, err error)
}

// runSteps runs every step to completion, in order. A step whose batch the
// server rejected is left there and the next one runs: the steps are
// independent, and one bad row (a counter the doctor would report damaged,
// say) must not stop the rest of the work. The failed steps' errors come
// back joined. It stops at once on any other error (the connection lost),
// when ctx is done, or when the run's lease is lost: before each batch it
// calls keep, which renews the lease or says it was lost.
func runSteps(ctx context.Context, op string, lease *jobLease, steps []step) error {
	var failed []error
	for _, s := range steps {
		for more := true; more; {
			if err := ctx.Err(); err != nil {
				return errors.Join(append(failed, fmt.Errorf("ratelimit: %s: %s: %w", op, s.name, err))...)
			}
			if err := lease.keep(ctx); err != nil {
				return errors.Join(append(failed, wrapDBError(op+": "+s.name, err))...)
			}
			var err error
			if more, err = s.run(); err != nil {
				failed = append(failed, wrapDBError(op+": "+s.name, err))
				if !rejectedByServer(err) {
					return errors.Join(failed...) // the connection or the server is in trouble: so would every next step be
				}
				break
			}
		}
	}
	return errors.Join(failed...)
}

// rowsStep runs one bounded single-statement batch and adds the rows it
// changed to *count; there is more to do while batches come back full.
func rowsStep(batch int32, stmt func(batch int32) (int64, error), count *int64) func() (bool, error) {
	return func() (bool, error) {
		n, err := stmt(batch)
		if err != nil {
			return false, err
		}
		*count += n
		return n == int64(batch), nil
	}
}

// findStep finds, per batch, up to batch rows to act on, acts on them in
// one statement and adds how many it changed to *count.
func findStep[T any](batch int32, find func(batch int32) ([]T, error), act func([]T) (int64, error), count *int64) func() (bool, error) {
	return func() (bool, error) {
		found, err := find(batch)
		if err != nil || len(found) == 0 {
			return false, err
		}
		n, err := act(found)
		if err != nil {
			return false, err
		}
		*count += n
		// A full batch of which nothing changed means others got to those
		// rows meanwhile: stop rather than spin.
		return len(found) == int(batch) && n > 0, nil
	}
}

// releaseStep releases, per batch, the open reservations that find selects
// (reason on each), in one call of pgadmit_settle (which locks their
// counters first, the lock order), and adds how many it released to *count.
func (m *Maintenance) releaseStep(ctx context.Context, batch int32, find func(batch int32) ([]pgtype.UUID, error), reason string, count *int64) func() (bool, error) {
	return findStep(batch, find, func(ids []pgtype.UUID) (int64, error) {
		p := releaseIDs(ids, reason)
		p.Now = m.opts.clock.at()
		settled, err := m.queries.AdmissionSettle(ctx, m.pool, p)
		return settledCount(settled), err
	}, count)
}

// keysetStep walks a table in bounded pages from the start of its key
// order: page reads the next page after its own last position and reports
// how many rows it read; there is more while pages come back full.
func keysetStep(batch int32, page func(batch int32) (scanned int32, err error)) func() (bool, error) {
	return func() (bool, error) {
		n, err := page(batch)
		if err != nil {
			return false, err
		}
		return n == batch, nil
	}
}

// rejectedByServer reports an error the server raised about a statement
// (which rolled back alone), as opposed to one of the connection or the
// client.
func rejectedByServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
