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
	// ReleasedStaleReservations: reservations still open in windows that
	// ended before the cutoff, released (reason window_ended) so that their
	// window can go. Their caller never settled them: no task (nothing for
	// Recover to find), or a reply lost after the server committed.
	ReleasedStaleReservations int64
	// Counters: counter windows that ended before the cutoff, with no open
	// reservation drawing on them.
	Counters int64
	// Reservations: finished (committed or released) reservations whose
	// window ended before the cutoff and whose counter row is gone
	// (including the stale ones this call released).
	Reservations int64
	// Leases: leases released, or expired without release, before the cutoff.
	Leases int64
	// Allotments: returned blocks of Local limits whose window ended before
	// the cutoff and whose counter row is gone.
	Allotments int64
	// Events: events of tasks finished before the cutoff (WithPruneEvents).
	Events int64
}

// String summarizes what was deleted, for logs and the CLI.
func (r PruneResult) String() string {
	return fmt.Sprintf("pruned before %s: released %d stale reservations; deleted %d counter windows, %d reservations, %d allotments, %d leases, %d events",
		r.Cutoff.UTC().Format(time.RFC3339), r.ReleasedStaleReservations, r.Counters, r.Reservations, r.Allotments, r.Leases, r.Events)
}

// reasonWindowEnded is recorded on the reservations Prune releases.
const reasonWindowEnded = "window_ended"

// epoch is the lower bound of the first page of a keyset walk: nothing in
// the tables is older.
var epoch = time.Unix(0, 0).UTC()

// Prune deletes history that ended more than olderThan ago (olderThan > 0),
// on the database's clock, in batches of WithPruneBatchSize rows, each its
// own short transaction: first it releases reservations still open in
// windows that ended before the cutoff (nobody settled them; their window no
// longer admits anything), then deletes counter windows, finished
// reservations, released or expired leases and (WithPruneEvents) events of
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
	batch := int32(l.opts.pruneBatchSize) // clamped to int4 by its option
	conn := l.conn

	staleReservations := func(ctx context.Context, r db.DBTX, batch int32) ([]pgtype.UUID, error) {
		return l.queries.PruneReservationFindStale(ctx, r, db.PruneReservationFindStaleParams{Cutoff: cutoff, BatchSize: batch})
	}
	counters := func(ctx context.Context, r db.DBTX, batch int32) (int64, error) {
		return l.queries.PruneCounters(ctx, r, db.PruneCountersParams{Cutoff: cutoff, BatchSize: batch})
	}
	releasedLeases := func(ctx context.Context, r db.DBTX, batch int32) (int64, error) {
		return l.queries.PruneLeasesReleased(ctx, r, db.PruneLeasesReleasedParams{Cutoff: cutoff, BatchSize: batch})
	}
	allotments := func(ctx context.Context, r db.DBTX, batch int32) (int64, error) {
		return l.queries.PruneAllotments(ctx, r, db.PruneAllotmentsParams{Cutoff: cutoff, BatchSize: batch})
	}
	expiredLeases := func(ctx context.Context, r db.DBTX, batch int32) (int64, error) {
		return l.queries.PruneLeasesExpired(ctx, r, db.PruneLeasesExpiredParams{Cutoff: cutoff, BatchSize: batch})
	}
	afterAt, afterID := epoch, pgtype.UUID{Valid: true}
	reservations := func() (bool, error) { // a keyset walk: finished rows whose counter remains are passed over
		row, err := l.queries.PruneReservations(ctx, conn, db.PruneReservationsParams{
			Cutoff: cutoff, AfterWindowStart: afterAt, AfterID: afterID, BatchSize: batch,
		})
		if err != nil {
			return false, err
		}
		res.Reservations += int64(row.Deleted)
		afterAt, afterID = row.LastWindowStart, row.LastID
		return row.Scanned == batch, nil
	}
	steps := []step{
		{"release stale reservations", l.releaseStep(ctx, conn, batch, staleReservations, reasonWindowEnded, &res.ReleasedStaleReservations)},
		{"counters", rowsStep(ctx, conn, batch, counters, &res.Counters)},
		{"reservations", reservations},
		{"allotments", rowsStep(ctx, conn, batch, allotments, &res.Allotments)},
		{"released leases", rowsStep(ctx, conn, batch, releasedLeases, &res.Leases)},
		{"expired leases", rowsStep(ctx, conn, batch, expiredLeases, &res.Leases)},
	}
	if l.opts.pruneEvents {
		after := epoch
		steps = append(steps, step{"events", func() (bool, error) {
			row, err := l.queries.PruneEvents(ctx, conn, db.PruneEventsParams{Cutoff: cutoff, AfterFinishedAt: after, BatchSize: batch})
			if err != nil {
				return false, err
			}
			res.Events += int64(row.Deleted)
			after = row.LastFinishedAt
			return row.Deleted == batch, nil
		}})
	}
	return res, runSteps(ctx, "prune", steps)
}
