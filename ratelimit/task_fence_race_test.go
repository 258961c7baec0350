package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// AppendEvent locks the task row once, in its UPDATE, and HeartbeatTask
// in a statement of its own before its UPDATE (TaskHeartbeatLock), as they
// are raced against FinishTask (which locks it FOR UPDATE) and Reserves
// for the task (FOR KEY SHARE). A version that first locked the row in a
// locking read and then updated it in the same statement deadlocked with a
// waiting FinishTask, or another heartbeat: 8 deadlocks in 300 rounds of
// this test (TestHeartbeatWaitingBesideFinishTaskForAnUpdatedRowDoesNotDeadlock
// plays that race in order). Every call must end with its typed answer,
// and the books balance.
func TestTaskFencesRaceFinishTaskWithoutDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools, ls, limits := fenceRace(t, "fence")
	jitter := func() { time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) }
	check := func(what string, err error) {
		if err != nil && !errors.Is(err, ratelimit.ErrStaleToken) && !errors.Is(err, ratelimit.ErrTaskFinished) {
			t.Errorf("%s: %v", what, err)
		}
	}
	const rounds, perRound = 200, 4
	for range rounds {
		tasks := make([]ratelimit.Task, perRound)
		for i := range tasks {
			tasks[i] = startSync(t, ls[i%len(ls)], time.Minute)
		}
		var wg sync.WaitGroup
		for i, task := range tasks {
			for j := range len(ls) {
				wg.Go(func() {
					jitter()
					_, err := ls[(i+j)%len(ls)].AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress"})
					check("AppendEvent", err)
				})
				wg.Go(func() {
					jitter()
					_, err := ls[(i+j+1)%len(ls)].HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
					check("HeartbeatTask", err)
				})
				wg.Go(func() {
					jitter()
					_, err := ls[(i+j+2)%len(ls)].Reserve(ctx, task.ID, task.AttemptID, limits)
					check("Reserve", err)
				})
			}
			wg.Go(func() {
				jitter()
				_, err := ls[i%len(ls)].FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
				check("FinishTask", err)
			})
		}
		wg.Wait()
		if t.Failed() {
			break
		}
	}
	if s := summary(t, pools[0]); s.TasksRunning != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 {
		t.Errorf("left after every task finished: %+v", s)
	}
	assertDoctorOK(t, pools[0])
}

// fenceRace sets up a task-fence race: three pools, three limiters (the
// second without combining), and the limits every Reserve of it takes: a
// window of an hour or a few minutes more (one with five minutes left, so
// that every round meets on its counter) on one key that never refuses, and
// a concurrency limit on it.
func fenceRace(t *testing.T, prefix string) ([]*pgxpool.Pool, []*ratelimit.Limiter, []ratelimit.Limit) {
	t.Helper()
	pools := pgtest.NewPools(t, 3)
	ls := []*ratelimit.Limiter{ratelimit.New(pools[0]), ratelimit.New(pools[1], ratelimit.WithoutCombining()), ratelimit.New(pools[2])}
	key := uniqueKey(prefix)
	limits := []ratelimit.Limit{window("key", key, "tokens", 1e12, 10), concurrent("key", key, 1e9)}
	limits[0].Window = pgtest.WindowWithRoom(t, pools[0], time.Hour, 5*time.Minute)
	return pools, ls, limits
}
