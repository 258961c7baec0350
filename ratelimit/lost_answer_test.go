package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// HeartbeatTask, AppendEvent and FinishTask whose caller's context ends
// after the server committed (the answer lost): the caller gets an error,
// and what a retry with the same token does is as their docs say. A
// heartbeat again extends the lease (idempotent); an event is appended a
// second time (not idempotent); a finish is refused with a
// *StaleTokenError naming the finished status, and GetTask shows the
// outcome the lost call wrote.
func TestTaskCallsWhoseAnswerIsLostAndRetried(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	direct := ratelimit.New(pool)
	bg := context.Background()

	// lose runs call on a pool whose answers to statements naming key are
	// held back, leaves once committed() is true, and lets the answer go
	// once call has returned. These calls run their statement in ctx
	// itself: leaving ends it through pgx's context watcher, on a goroutine
	// of its own, which sets the connection's deadline, and the held read
	// then fails. Letting the answer go before that (after a fixed sleep,
	// as this used to) let a late watcher find it read, and the call
	// succeed.
	lose := func(t *testing.T, key string, call func(context.Context, *ratelimit.Limiter) error, committed func() bool) error {
		t.Helper()
		held, answers := holdAnswers(t, pool, key)
		l := ratelimit.New(held, ratelimit.WithoutCombining())
		ctx, leave := context.WithCancel(bg)
		errs := make(chan error, 1)
		go func() { errs <- call(ctx, l) }()
		for deadline := time.Now().Add(10 * time.Second); !committed(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: never committed", key)
			}
		}
		leave()
		defer answers.release()
		select {
		case err := <-errs:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the call did not return within 10 s of its caller leaving", key)
			return nil
		}
	}

	t.Run("heartbeat", func(t *testing.T) {
		task := startSync(t, direct, time.Minute)
		before := getTask(t, direct, task.ID).LeaseExpiresAt
		tok := mustUUID(t, task.ExecutionToken)
		err := lose(t, string(tok.Bytes[:]), func(ctx context.Context, l *ratelimit.Limiter) error {
			_, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Hour)
			return err
		}, func() bool { return getTask(t, direct, task.ID).LeaseExpiresAt.After(before.Add(time.Minute)) })
		if err == nil {
			t.Fatalf("HeartbeatTask whose answer was lost: no error")
		}
		if _, err := direct.HeartbeatTask(bg, task.ID, task.ExecutionToken, time.Hour); err != nil {
			t.Errorf("HeartbeatTask retried: %v, want the lease extended again", err)
		}
	})

	t.Run("event", func(t *testing.T) {
		task := startSync(t, direct, time.Minute)
		key := uniqueKey("event")
		count := func() int {
			n := 0
			for _, e := range eventTypes(t, direct, task.ID) {
				if e == key {
					n++
				}
			}
			return n
		}
		err := lose(t, key, func(ctx context.Context, l *ratelimit.Limiter) error {
			_, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: key})
			return err
		}, func() bool { return count() == 1 })
		if err == nil {
			t.Fatalf("AppendEvent whose answer was lost: no error")
		}
		if _, err := direct.AppendEvent(bg, task.ID, task.ExecutionToken, ratelimit.Event{Type: key}); err != nil {
			t.Fatalf("AppendEvent retried: %v", err)
		}
		if n := count(); n != 2 {
			t.Errorf("AppendEvent retried after a lost answer: %d events, want 2 (a retry appends again, as documented)", n)
		}
	})

	t.Run("finish", func(t *testing.T) {
		task := startSync(t, direct, time.Minute)
		key := uniqueKey("finish")
		out := ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "upstream", ErrorMessage: key}
		err := lose(t, key, func(ctx context.Context, l *ratelimit.Limiter) error {
			_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, out)
			return err
		}, func() bool { return getTask(t, direct, task.ID).Status == ratelimit.TaskFailed })
		if err == nil {
			t.Fatalf("FinishTask whose answer was lost: no error")
		}
		_, err = direct.FinishTask(bg, task.ID, task.ExecutionToken, out)
		if stale := asStale(t, err); stale.Status != ratelimit.TaskFailed {
			t.Errorf("FinishTask retried: %+v, want a *StaleTokenError with status failed", stale)
		}
		if got := getTask(t, direct, task.ID); got.ErrorCode != out.ErrorCode || got.ErrorMessage != key {
			t.Errorf("the task after the lost finish: %q %q, want the lost call's outcome", got.ErrorCode, got.ErrorMessage)
		}
	})
	assertDoctorOK(t, pool)
}
