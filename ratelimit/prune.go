package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// WithPruneEvents makes Prune also delete the events of tasks that finished
// before its cutoff (default false: events are the tasks' history, which
// some gateways keep longer than the books).
func WithPruneEvents(on bool) Option {
	return func(o *options) { o.pruneEvents = on }
}

// PruneResult counts the rows one Prune call deleted.
type PruneResult struct {
	// Cutoff is now() - olderThan on the database's clock: only what ended
	// before it was deleted.
	Cutoff time.Time
	// Counters: counter windows that ended before the cutoff, with no open
	// reservation drawing on them.
	Counters int64
	// Reservations: finished (committed or released) reservations finalized
	// before the cutoff, whose window ended before it and whose counter row
	// is gone.
	Reservations int64
	// Leases: leases released, or expired without release, before the cutoff.
	Leases int64
	// Events: events of tasks finished before the cutoff (WithPruneEvents).
	Events int64
}

// String summarizes what was deleted, for logs and the CLI.
func (r PruneResult) String() string {
	return fmt.Sprintf("pruned before %s: %d counter windows, %d reservations, %d leases, %d events",
		r.Cutoff.UTC().Format(time.RFC3339), r.Counters, r.Reservations, r.Leases, r.Events)
}

// epoch is the lower bound of the first page of a keyset walk: nothing in
// the tables is older.
var epoch = time.Unix(0, 0).UTC()

// Prune deletes history that ended more than olderThan ago (olderThan > 0),
// on the database's clock, in batches of WithPruneBatchSize rows, each its
// own short statement: counter windows first, then finished reservations,
// then released or expired leases, then (WithPruneEvents) events of
// long-finished tasks. It never touches live state: a window is kept while
// an open reservation draws on it, and a finished reservation is kept as
// long as its counter row exists, so every remaining counter still equals
// the sum of its reservations (Doctor stays clean). Tasks and attempts are
// not deleted. Not available on a Limiter bound to a transaction
// (ErrOwnTransactions).
func (l *Limiter) Prune(ctx context.Context, olderThan time.Duration) (PruneResult, error) {
	if olderThan <= 0 {
		return PruneResult{}, &ValidationError{Field: "olderThan", Value: olderThan, Reason: "must be positive"}
	}
	if err := l.ownTransactions(); err != nil {
		return PruneResult{}, err
	}
	cutoff, err := l.queries.PruneCutoff(ctx, l.conn, olderThan.Seconds())
	if err != nil {
		return PruneResult{}, wrapDBError("prune: cutoff", err)
	}
	res := PruneResult{Cutoff: cutoff}
	batch := int32(l.opts.pruneBatchSize)

	step := func(name string, run func() (more bool, err error)) error {
		for more := true; more; {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("ratelimit: prune %s: %w", name, err)
			}
			var err error
			if more, err = run(); err != nil {
				return wrapDBError("prune "+name, err)
			}
		}
		return nil
	}
	rows := func(stmt func() (int64, error), count *int64) func() (bool, error) {
		return func() (bool, error) {
			n, err := stmt()
			*count += n
			return n == int64(batch), err
		}
	}

	if err := step("counters", rows(func() (int64, error) {
		return l.queries.PruneCounters(ctx, l.conn, db.PruneCountersParams{Cutoff: cutoff, BatchSize: batch})
	}, &res.Counters)); err != nil {
		return res, err
	}

	afterAt, afterID := epoch, pgtype.UUID{Valid: true}
	if err := step("reservations", func() (bool, error) {
		row, err := l.queries.PruneReservations(ctx, l.conn, db.PruneReservationsParams{
			Cutoff: cutoff, AfterFinalizedAt: afterAt, AfterID: afterID, BatchSize: batch,
		})
		if err != nil {
			return false, err
		}
		res.Reservations += int64(row.Deleted)
		afterAt, afterID = row.LastFinalizedAt, row.LastID
		return row.Scanned == batch, nil
	}); err != nil {
		return res, err
	}

	if err := step("released leases", rows(func() (int64, error) {
		return l.queries.PruneLeasesReleased(ctx, l.conn, db.PruneLeasesReleasedParams{Cutoff: cutoff, BatchSize: batch})
	}, &res.Leases)); err != nil {
		return res, err
	}
	if err := step("expired leases", rows(func() (int64, error) {
		return l.queries.PruneLeasesExpired(ctx, l.conn, db.PruneLeasesExpiredParams{Cutoff: cutoff, BatchSize: batch})
	}, &res.Leases)); err != nil {
		return res, err
	}

	if l.opts.pruneEvents {
		after := epoch
		if err := step("events", func() (bool, error) {
			row, err := l.queries.PruneEvents(ctx, l.conn, db.PruneEventsParams{Cutoff: cutoff, AfterFinishedAt: after, BatchSize: batch})
			if err != nil {
				return false, err
			}
			res.Events += int64(row.Deleted)
			after = row.LastFinishedAt
			return row.Deleted == batch, nil
		}); err != nil {
			return res, err
		}
	}
	return res, nil
}
