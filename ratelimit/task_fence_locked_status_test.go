package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// HeartbeatTask's and AppendEvent's statements report the task's status as
// they found it under its row lock: one that waited for a FinishTask
// names the finished status. They reported the status their snapshot saw
// before the wait (running, the token matching), and the Limiter read the
// task again in a second round trip, by which time another worker may have
// claimed it (a later state than the one that refused the call).
func TestTaskFencesNameTheStatusTheyLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	calls := map[string]func(id, tok pgtype.UUID) (status string, done bool, err error){
		"TaskHeartbeat": func(id, tok pgtype.UUID) (string, bool, error) {
			row, err := queries.TaskHeartbeat(ctx, pool, db.TaskHeartbeatParams{TaskID: id, Token: tok, LeaseSeconds: 60})
			return row.Status, row.RenewedUntil != nil, err
		},
		"EventAppend": func(id, tok pgtype.UUID) (string, bool, error) {
			row, err := queries.EventAppend(ctx, pool, db.EventAppendParams{TaskID: id, Token: tok, EventType: "task.progress", Payload: "{}"})
			return row.Status, row.Seq.Valid, err
		},
	}
	for name, call := range calls {
		task := startSync(t, l, time.Minute)
		id, tok := mustUUID(t, task.ID), mustUUID(t, task.ExecutionToken)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.WithTx(tx).FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatalf("FinishTask: %v", err)
		}
		type answer struct {
			status string
			done   bool
			err    error
		}
		answered := make(chan answer, 1)
		go func() {
			status, done, err := call(id, tok)
			answered <- answer{status, done, err}
		}()
		pgtest.AwaitLockWaiters(t, pool, name)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-answered
		if a.err != nil || a.done || a.status != ratelimit.TaskSucceeded {
			t.Errorf("%s that waited for FinishTask: status %q, done %v, %v; want status succeeded, nothing done",
				name, a.status, a.done, a.err)
		}
	}
	assertDoctorOK(t, pool)
}
