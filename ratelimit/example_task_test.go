package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The task flow: a gateway creates an async task, admitted against the
// API key's queue (queue_size: unfinished tasks), and a worker claims it,
// reserves its upstream call for the task's attempt, and finishes it with
// its execution token. Finishing frees the queue place.
func ExampleLimiter_CreateTask() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	// The gateway: one unfinished task at a time for this key.
	apiKey := ratelimit.Scope{Type: "api_key", Key: "key_tasks"}
	spec := ratelimit.TaskSpec{
		Async:       true,
		Kind:        "image",
		Payload:     json.RawMessage(`{"prompt": "a lighthouse at dusk"}`),
		QueueLimits: []ratelimit.Limit{{Scope: apiKey, Metric: ratelimit.MetricQueueSize, Limit: 1}},
	}
	task, err := limiter.CreateTask(ctx, spec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", task.Status)
	_, err = limiter.CreateTask(ctx, spec)
	var exceeded *ratelimit.ExceededError
	if errors.As(err, &exceeded) {
		fmt.Printf("second refused: %s %g of %g\n", exceeded.Metric, exceeded.Current, exceeded.Limit)
	}

	// A worker.
	claimed, err := limiter.ClaimTask(ctx, "worker-1", 0) // ErrNoTask when nothing is due
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", claimed.Status, "by", claimed.Worker, "| attempt", claimed.AttemptCount)
	grant, err := limiter.Reserve(ctx, claimed.ID, claimed.AttemptID, []ratelimit.Limit{
		{Scope: apiKey, Metric: "images", Limit: 100, Amount: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	// ... call the upstream, heartbeat with HeartbeatTask on a long call ...
	if _, err := limiter.AppendEvent(ctx, claimed.ID, claimed.ExecutionToken,
		ratelimit.Event{Type: "task.progress", Progress: 0.5, Message: "halfway"}); err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Commit(ctx, grant, nil); err != nil { // commit before finishing
		log.Fatal(err)
	}
	done, err := limiter.FinishTask(ctx, claimed.ID, claimed.ExecutionToken,
		ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("finished:", done.Task.Status, "| queue places freed:", done.DeletedAdmissions,
		"| left uncommitted:", done.ReleasedReservations)

	// A stale token (a worker whose claim ended) is fenced off.
	_, err = limiter.FinishTask(ctx, claimed.ID, claimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed})
	fmt.Println("finish again:", errors.Is(err, ratelimit.ErrStaleToken))

	events, err := limiter.TaskEvents(ctx, claimed.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println("event", e.Seq, e.Type)
	}
	// Output:
	// created: queued
	// second refused: queue_size 1 of 1
	// claimed: running by worker-1 | attempt 1
	// finished: succeeded | queue places freed: 1 | left uncommitted: 0
	// finish again: true
	// event 1 task.queued
	// event 2 task.running
	// event 3 task.progress
	// event 4 task.completed
}

// A gateway whose client went away cancels the task it queued: the queue
// place and what it reserved for the task come back at once, and no worker
// will run it. It is cancelled once; a task a worker has claimed is the
// worker's to finish.
func ExampleLimiter_CancelTask() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close()

	apiKey := ratelimit.Scope{Type: "api_key", Key: "key_cancel"}
	task, err := limiter.CreateTask(ctx, ratelimit.TaskSpec{
		Async:       true,
		Kind:        "image",
		QueueLimits: []ratelimit.Limit{{Scope: apiKey, Metric: ratelimit.MetricQueueSize, Limit: 1}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// The gateway holds the key's image credit for the task while it waits.
	if _, err := limiter.Reserve(ctx, task.ID, "", []ratelimit.Limit{
		{Scope: apiKey, Metric: "images", Limit: 100, Amount: 1},
	}); err != nil {
		log.Fatal(err)
	}

	// The client went away.
	res, err := limiter.CancelTask(ctx, task.ID, "client disconnected")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled:", res.Task.Status, res.Task.ErrorCode, "| queue places freed:", res.DeletedAdmissions,
		"| reservations released:", res.ReleasedReservations)

	_, err = limiter.CancelTask(ctx, task.ID, "client disconnected")
	var notQueued *ratelimit.TaskNotQueuedError
	if errors.As(err, &notQueued) {
		fmt.Println("cancel again refused, the task is", notQueued.Status)
	}
	// Output:
	// cancelled: cancelled cancelled_while_queued | queue places freed: 1 | reservations released: 1
	// cancel again refused, the task is cancelled
}
