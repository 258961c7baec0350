package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// runEndBatch sends FinishTask's or CancelTask's batch, which, once sent,
// runs to its answer when ctx ends meanwhile (statementContext), as the
// statement of a Reserve or a ClaimTask does (runToAnswer): the server may
// commit it all the same, and only its answer names the reservations
// linked to the task since the call's first read, which nobody else
// releases before Recover (the caller releases them, in the background
// once ctx is over: releaseLate). Still unanswered leftGrace after ctx
// ended, it is cancelled. A ctx already over sends nothing. Inside a
// caller's transaction it runs in ctx as it is: a cancelled statement
// ends the transaction, and what it did is rolled back with it.
//
// On a *pgxpool.Pool, when pgx gave the batch's connection up unread (the
// batch cancelled without ConfigurePool, its answer's deadline passed, the
// connection broke), the batch may have committed, and the reservations it
// would have named are unknown: unread is then closed once pgx is done
// closing that connection (releaseIfEndedUnread). Nil otherwise.
func (l *Limiter) runEndBatch(ctx context.Context, b *pgx.Batch) (unread <-chan struct{}, err error) {
	if l.inTx {
		return nil, runBatch(ctx, l.conn, b)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := statementContext(ctx, l.opts.leftGrace)
	defer cancel()
	pool, ok := l.conn.(*pgxpool.Pool)
	if !ok {
		return nil, runBatch(sctx, l.conn, b)
	}
	// As pool.SendBatch does, but holding the connection, to tell whether
	// pgx gave it up with the batch unread.
	c, err := pool.Acquire(sctx)
	if err != nil {
		return nil, err // nothing sent
	}
	defer c.Release()
	pg := c.Conn().PgConn()
	err = c.SendBatch(sctx, b).Close()
	if err != nil && pg.IsClosed() && answerLost(err, true) {
		return pg.CleanupDone(), err
	}
	return nil, err
}

// releaseIfEndedUnread releases, in the background, the open reservations
// of the task id once pgx is done closing the connection of its
// FinishTask's or CancelTask's batch, whose answer was lost (unread, from
// runEndBatch), if the task has ended by then. Only the answer named the
// reservations linked to the task after the call's first read; the call
// cannot know whether the batch committed.
//
// pgx closes such a connection after a cancel request, and a Terminate
// that the server reads after the batch (its messages come first): once
// the server has closed the connection, the batch's transaction is over,
// committed or rolled back, and a plain read (TaskFinishPlan, no lock)
// tells. A task that has ended takes no new reservation (the fence), and
// an open reservation of a task that has ended is one Recover releases:
// releasing them all is exact, whoever ended the task. AdmissionSettle
// locks their counters, then their rows, and no task row (the lock order),
// and skips what is settled already. pgx waits for the server's close for
// up to 15 s; a batch that lasts longer (its cancel request lost, its lock
// still held) may commit after the read, as may one whose connection broke
// (the server runs on until it writes) or one behind a pooler (which
// closes the client's connection without waiting for its server's), and
// leaves them to Recover.
func (l *Limiter) releaseIfEndedUnread(unread <-chan struct{}, id pgtype.UUID, now *time.Time) {
	closed := func() {
		select {
		case <-unread:
		case <-time.After(unreadCloseWait): // pgx's own bound is 15 s: a bound of ours too
		}
	}
	// Waiting for it holds none of the give-backs' turns (which, on a pool
	// not set up with ConfigurePool, a storm of task ends whose callers left
	// would all take, for seconds each); Close waits for it.
	l.giveBackUnheldAfter(closed, func(handedOver time.Time) {
		l.retryUnheld(handedOver, func(ctx context.Context) error {
			plan, err := l.queries.TaskFinishPlan(ctx, l.conn, db.TaskFinishPlanParams{TaskID: id})
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // pruned
			}
			if err != nil {
				return err
			}
			if !taskEnded(plan.Status) || len(plan.OpenReservationIds) == 0 {
				return nil
			}
			sp := releaseIDs(plan.OpenReservationIds, reasonTaskFinished)
			sp.Now = now
			_, err = l.queries.AdmissionSettle(ctx, l.conn, sp)
			return err
		})
	})
}

// unreadCloseWait bounds releaseIfEndedUnread's wait for pgx to close a
// connection given up unread, which pgx bounds at 15 s itself.
const unreadCloseWait = 20 * time.Second

// taskEnded reports whether status is one a task keeps for good.
func taskEnded(status string) bool {
	return status == TaskSucceeded || status == TaskFailed || status == TaskCancelled
}
