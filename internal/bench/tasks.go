package bench

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// T1 runs gateway requests as tasks, as a gateway runs a long request (a
// long generation, an image): each operation creates a sync task, admitted
// against its API key's queue (queue_size), reserves W2's limits for the
// task's attempt, heartbeats the task's execution lease t1Heartbeats times
// (with Config.Think, a pause before each, as the upstream call runs),
// commits the actual tokens and finishes the task. The row's latency is the
// whole task's, the pauses left out; Result.Steps says what each call cost.
//
// It claims no task: ClaimTask takes the next due async task of the whole
// database, another run's or another application's too, which a benchmark
// must not take. Nor is it in the default run (Workload.OptIn).

const (
	t1Heartbeats = 3
	// t1LeaseTTL is the tasks' execution lease, which each heartbeat renews: a task that an
	// interrupted run could not finish is failed by Recover this long after its last heartbeat.
	t1LeaseTTL   = 30 * time.Second
	t1QueueLimit = 1_000 // unfinished tasks per API key: never reached with 256 workers
)

// T1's steps, the calls of one operation, in order.
const (
	stepCreate = iota
	stepReserve
	stepHeartbeat
	stepCommit
	stepFinish
	taskSteps
)

var taskStepNames = [taskSteps]string{"create", "reserve", "heartbeat", "commit", "finish"}

// errTaskStep is the error of a task's step after its Reserve admitted: the admission counts,
// the error too (as errCommit).
type errTaskStep struct {
	step int
	err  error
}

func (e errTaskStep) Error() string { return taskStepNames[e.step] + ": " + e.err.Error() }
func (e errTaskStep) Unwrap() error { return e.err }
func (errTaskStep) afterAdmission() {}

// taskWorker is what one T1 worker keeps: its steps' latencies, with a sampler of its own (the
// workload's draws stay drive's), and what its FinishTask calls reported. Only the worker
// touches it while the workload runs.
type taskWorker struct {
	steps   [taskSteps]latencies
	sampler *mrand.Rand
	// uncommitted counts the reservations FinishTask released: every grant is committed before
	// its task finishes, so any is a unit the books would miss.
	uncommitted int64
}

func (r *runner) t1(ctx context.Context) (Result, error) {
	// A kind of their own per run and round: the tasks read back are this round's.
	kind := r.key("t1-r" + strconv.Itoa(r.round))
	keep := r.keep
	if keep <= 0 {
		keep = max(maxLatencies/(r.cfg.Workers*taskSteps), 1)
	}
	workers := make([]taskWorker, r.cfg.Workers)
	seed := uint64(time.Now().UnixNano())
	for w := range workers {
		workers[w].sampler = mrand.New(mrand.NewPCG(uint64(w)+2<<32, seed))
	}
	res, err := r.checkingBooks(ctx, r.requestBooks("t1-k", "t1-m"), func() (Result, error) {
		res, err := r.measure(ctx, r.cfg.Duration, func(ctx context.Context, worker int, rng *mrand.Rand) error {
			return r.task(ctx, worker, rng, kind, &workers[worker], keep)
		})
		res.Steps = taskStepLatencies(workers)
		return res, err
	})
	if err != nil || res.Errors > 0 {
		return res, err // what a failed operation left is unknown: not checked, as the books
	}
	totals, err := db.New().TaskTotalsByKind(ctx, r.reads, kind)
	if err != nil {
		return res, fmt.Errorf("read back T1's tasks: %w", err)
	}
	var uncommitted int64
	for _, w := range workers {
		uncommitted += w.uncommitted
	}
	for _, c := range []Check{
		{Name: "tasks succeeded", Want: res.Admitted, Got: totals.Succeeded},
		{Name: "tasks unfinished (queued or running)", Want: 0, Got: totals.Unfinished},
		{Name: "tasks' queue places still held", Want: 0, Got: totals.QueuePlaces},
		{Name: "tasks' reservations still open", Want: 0, Got: totals.OpenReservations},
		{Name: "reservations FinishTask released uncommitted", Want: 0, Got: uncommitted},
	} {
		c.OK = c.Want == c.Got
		res.Checks = append(res.Checks, c)
	}
	return res, nil
}

// task runs one T1 operation on the worker's instance: a sync task of kind, from its creation to
// its end. A task it leaves running, interrupted or after a step failed, it ends (endTask).
func (r *runner) task(ctx context.Context, worker int, rng *mrand.Rand, kind string, tw *taskWorker, keep int) (err error) {
	lim := instance(r.lims, worker)
	limits := r.requestLimits(rng, "t1-k", "t1-m")
	apiKey := limits[0].Scope // the task's queue place is its API key's
	// timed runs one step's call and keeps its latency when it succeeded.
	timed := func(step int, call func() error) error {
		start := time.Now()
		err := call()
		if err == nil {
			tw.steps[step].add(time.Since(start), keep, tw.sampler)
		}
		return err
	}

	var task ratelimit.Task
	err = timed(stepCreate, func() (err error) {
		task, err = lim.CreateTask(ctx, ratelimit.TaskSpec{
			Kind: kind, Worker: r.keyN("t1-worker", worker), LeaseTTL: t1LeaseTTL,
			QueueLimits: []ratelimit.Limit{{Scope: apiKey, Metric: ratelimit.MetricQueueSize, Limit: t1QueueLimit}},
		})
		return err
	})
	if err != nil {
		return err // no task (one created for a caller who left is cancelled by CreateTask)
	}
	finished := false
	defer func() {
		if !finished {
			r.endTask(ctx, lim, task, err)
		}
	}()

	var g ratelimit.Grant
	err = timed(stepReserve, func() (err error) {
		g, err = lim.Reserve(ctx, task.ID, task.AttemptID, limits)
		return err
	})
	if err != nil {
		return err
	}
	for range t1Heartbeats {
		r.think(ctx, worker, rng)
		if ctx.Err() != nil {
			return ctx.Err() // interrupted in the upstream call: endTask gives the grant back
		}
		if err := timed(stepHeartbeat, func() error {
			_, err := lim.HeartbeatTask(ctx, task.ID, task.ExecutionToken, t1LeaseTTL)
			return err
		}); err != nil {
			return errTaskStep{stepHeartbeat, err}
		}
	}
	if err := timed(stepCommit, func() error { _, err := lim.Commit(ctx, g, gatewayActual); return err }); err != nil {
		return errTaskStep{stepCommit, err}
	}
	var done ratelimit.FinishResult
	if err := timed(stepFinish, func() (err error) {
		done, err = lim.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		return err
	}); err != nil {
		return errTaskStep{stepFinish, err}
	}
	finished = true
	tw.uncommitted += int64(done.ReleasedReservations)
	return nil
}

// endTask ends a task that its operation left running, within the run's grace, as the demo
// ends its interrupted requests' tasks: FinishTask releases what the task holds (its
// reservations and lease, its queue place). A task that finished all the same (a FinishTask
// whose answer was lost) refuses the token: it holds nothing.
func (r *runner) endTask(ctx context.Context, lim *ratelimit.Limiter, task ratelimit.Task, cause error) {
	out := ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "bench_failed", ErrorMessage: fmt.Sprint(cause)}
	if ctx.Err() != nil {
		out = ratelimit.Outcome{Status: ratelimit.TaskCancelled, ErrorCode: "bench_interrupted", ErrorMessage: reasonInterrupted}
	}
	_ = r.grace.Do(func(ctx context.Context) error {
		_, err := lim.FinishTask(ctx, task.ID, task.ExecutionToken, out)
		if errors.Is(err, ratelimit.ErrStaleToken) {
			return nil
		}
		return err
	})
}

// taskStepLatencies are the latencies of T1's steps over its workers.
func taskStepLatencies(workers []taskWorker) []Step {
	steps := make([]Step, taskSteps)
	for i := range steps {
		var groups []latencies
		for _, w := range workers {
			groups = append(groups, w.steps[i])
		}
		ps := percentiles(groups, 50, 99)
		steps[i] = Step{Name: taskStepNames[i], P50us: ps[0].Microseconds(), P99us: ps[1].Microseconds()}
		for _, g := range groups {
			steps[i].Calls += g.ops
		}
	}
	return steps
}
