package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// FinishTask locks the task row FOR UPDATE (TaskFinishLock), which waits
// for, and is waited for by, every statement that inserts a row naming the
// task (FOR KEY SHARE). Raced here, over several pools (instances) and
// combiner settings, against every other call on the same tasks: Reserves
// for the tasks (combined batches naming several tasks, and alone),
// Attach, HeartbeatTask, AppendEvent, a ClaimTask and CreateTask whose
// callers leave at once, Recover and Prune. No call may deadlock or fail
// with anything but its typed answer (ErrTaskFinished, ErrStaleToken,
// ErrNoTask, the caller's own context error), no round may wait long, and
// in the end nothing is held and Doctor is clean.
func TestFinishTaskForUpdateRacesEveryTaskCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 3)
	ls := []*ratelimit.Limiter{
		ratelimit.New(pools[0]),
		ratelimit.New(pools[1], ratelimit.WithoutCombining()),
		ratelimit.New(pools[2], ratelimit.WithCombining(8, 1)),
	}
	m := ratelimit.NewMaintenance(pools[0], ratelimit.WithTaskRetention(time.Millisecond))
	k1, k2 := uniqueKey("k"), uniqueKey("k")
	limits := []ratelimit.Limit{
		window("key", k1, "tokens", 1e12, 10), window("key", k2, "tokens", 1e12, 10), concurrent("key", k1, 1e9),
	}
	hour := pgtest.WindowWithRoom(t, pools[0], time.Hour, 5*time.Minute) // an hour or a few minutes more
	limits[0].Window, limits[1].Window = hour, hour

	unexpected := func(what string, err error, allowed ...error) {
		if err == nil {
			return
		}
		for _, a := range allowed {
			if errors.Is(err, a) {
				return
			}
		}
		t.Errorf("%s: %v", what, err)
	}
	const rounds, perRound = 40, 4
	for round := range rounds {
		tasks := make([]ratelimit.Task, perRound)
		for i := range tasks {
			tasks[i] = startSync(t, ls[i%len(ls)], time.Minute)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		began := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var loose []ratelimit.Grant // grants without a task whose Attach failed
		for i, task := range tasks {
			for j := range 3 {
				l := ls[(i+j)%len(ls)]
				wg.Go(func() {
					_, err := l.Reserve(rctx, task.ID, task.AttemptID, limits)
					unexpected("Reserve", err, ratelimit.ErrTaskFinished, ratelimit.ErrUnknownTask) // Prune may have deleted it
				})
			}
			wg.Go(func() {
				l := ls[(i+1)%len(ls)]
				g, err := l.Reserve(rctx, "", "", limits)
				if err != nil {
					t.Errorf("Reserve without a task: %v", err)
					return
				}
				if _, err := l.Attach(rctx, task.AttemptID, g); err != nil {
					unexpected("Attach", err, ratelimit.ErrTaskFinished, ratelimit.ErrUnknownTask)
					mu.Lock()
					loose = append(loose, g)
					mu.Unlock()
				}
			})
			wg.Go(func() {
				_, err := ls[(i+2)%len(ls)].HeartbeatTask(rctx, task.ID, task.ExecutionToken, time.Minute)
				unexpected("HeartbeatTask", err, ratelimit.ErrStaleToken, ratelimit.ErrUnknownTask)
			})
			wg.Go(func() {
				_, err := ls[i%len(ls)].AppendEvent(rctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "progress"})
				unexpected("AppendEvent", err, ratelimit.ErrStaleToken, ratelimit.ErrUnknownTask)
			})
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				_, err := ls[(i+1)%len(ls)].FinishTask(rctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
				unexpected("FinishTask", err)
			})
		}
		// Async tasks whose creators and claimers leave at once.
		wg.Go(func() {
			l := ls[round%len(ls)]
			cctx, ccancel := context.WithTimeout(rctx, time.Duration(rand.IntN(2000))*time.Microsecond)
			_, err := l.CreateTask(cctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit(k1, 1e6)}})
			ccancel()
			unexpected("CreateTask", err, context.DeadlineExceeded)
			cctx, ccancel = context.WithTimeout(rctx, time.Duration(rand.IntN(2000))*time.Microsecond)
			got, err := l.ClaimTask(cctx, "w", time.Minute)
			ccancel()
			unexpected("ClaimTask", err, context.DeadlineExceeded, ratelimit.ErrNoTask)
			if err == nil {
				_, err := l.Reserve(rctx, got.ID, got.AttemptID, limits)
				unexpected("Reserve for a claimed task", err, ratelimit.ErrTaskFinished)
				_, err = l.FinishTask(rctx, got.ID, got.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
				unexpected("FinishTask of a claimed task", err)
			}
		})
		wg.Go(func() {
			_, err := m.Recover(rctx)
			unexpected("Recover", err)
		})
		wg.Go(func() {
			_, err := m.Prune(rctx, time.Hour)
			unexpected("Prune", err)
		})
		wg.Wait()
		cancel()
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("round %d took %v", round, d)
		}
		for _, g := range loose {
			if _, err := ls[0].Release(ctx, g, "test"); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
		if t.Failed() {
			return
		}
	}
	// Drain the async tasks left queued (created, their creators gone,
	// claimed by nobody here), then nothing may be held. Close first: the
	// give-backs for callers who left run in the background.
	for _, l := range ls {
		l.Close()
	}
	for {
		got, err := ls[0].ClaimTask(ctx, "drain", time.Minute)
		if errors.Is(err, ratelimit.ErrNoTask) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls[0].FinishTask(ctx, got.ID, got.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	assertNothingHeld(t, pools[0], "key", k1)
	assertNothingHeld(t, pools[0], "key", k2)
	assertDoctorOK(t, pools[0])
}

// A combined batch of concurrent Reserve calls, one for a task that
// FinishTask finishes while the batch waits for a counter (after the
// batch's first task check): the batch meets SQLSTATE P0T01, is rolled
// back whole and run again one request at a time. The other callers in it
// get their grants, the finished task's caller ErrTaskFinished, and
// nothing stays held for the finished task.
func TestCombinedBatchMeetingAFinishedTaskRunsAgainOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"hot", []ratelimit.Option{ratelimit.WithCombining(16, 1)}},
		{"cold", []ratelimit.Option{ratelimit.WithCombining(16, 1), ratelimit.WithoutHotBatches()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			l := ratelimit.New(pool, tc.opts...)
			k0, key := uniqueKey("k"), uniqueKey("k")
			first := []ratelimit.Limit{window("key", k0, "requests", 100, 1)}
			limits := []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)}
			hour := hourWindow(t, pool) // an hour or a few minutes more, with a minute left
			first[0].Window, limits[0].Window = hour, hour
			taskA, taskB := startSync(t, l, time.Minute), startSync(t, l, time.Minute)

			// blocker0 holds the counter of the one statement in flight,
			// blocker1 the counter the batch queued behind it will wait for.
			blockers := make([]interface {
				Rollback(context.Context) error
			}, 2)
			for i, lim := range [][]ratelimit.Limit{first, limits[:1]} {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if _, err := l.WithTx(tx).Reserve(ctx, "", "", lim); err != nil {
					t.Fatal(err)
				}
				blockers[i] = tx
			}
			type answer struct {
				g   ratelimit.Grant
				err error
			}
			inFlight := make(chan answer, 1)
			go func() { g, err := l.Reserve(ctx, "", "", first); inFlight <- answer{g, err} }()
			pgtest.AwaitLockWaiters(t, pool, "the statement in flight")
			answers := make([]chan answer, 3)
			for i, task := range []ratelimit.Task{taskA, taskB, {}} {
				answers[i] = make(chan answer, 1)
				go func() { g, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); answers[i] <- answer{g, err} }()
			}
			for deadline := time.Now().Add(10 * time.Second); l.QueuedReserves() < 3; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d Reserve calls queued, want 3", l.QueuedReserves())
				}
			}
			if err := blockers[0].Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			a0 := <-inFlight
			if a0.err != nil {
				t.Fatalf("the statement in flight: %v", a0.err)
			}
			pgtest.AwaitLockWaiters(t, pool, "the batch")
			if _, err := l.FinishTask(ctx, taskB.ID, taskB.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
				t.Fatalf("FinishTask: %v", err)
			}
			if err := blockers[1].Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			a, b, n := <-answers[0], <-answers[1], <-answers[2]
			if a.err != nil || n.err != nil {
				t.Fatalf("the other callers in the batch: %v, %v; want grants", a.err, n.err)
			}
			if !errors.Is(b.err, ratelimit.ErrTaskFinished) {
				t.Errorf("the finished task's caller: %v, want ErrTaskFinished", b.err)
			}
			if len(a.g.Reservations) != 1 || len(a.g.Leases) != 1 || a.g.TaskID != taskA.ID {
				t.Errorf("task A's grant: %+v", a.g)
			}
			if _, err := l.FinishTask(ctx, taskA.ID, taskA.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
				t.Fatal(err)
			}
			for _, g := range []ratelimit.Grant{n.g, a0.g} {
				if _, err := l.Release(ctx, g, "test"); err != nil {
					t.Fatal(err)
				}
			}
			assertNothingHeld(t, pool, "key", key)
			assertNothingHeld(t, pool, "key", k0)
			assertDoctorOK(t, pool)
		})
	}
}
