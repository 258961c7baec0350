package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func TestTaskLifecycleAsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)

	created, err := l.CreateTask(ctx, ratelimit.TaskSpec{
		Async: true, Kind: "chat", Payload: json.RawMessage(`{"model":"m"}`),
		QueueLimits: []ratelimit.Limit{queueLimit("q", 5)},
	})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if created.Status != ratelimit.TaskQueued || created.ExecutionToken != "" || created.AttemptID != "" || created.AttemptCount != 0 {
		t.Fatalf("created async task = %+v, want queued without a claim", created)
	}
	if got := getTask(t, l, created.ID); !cmp.Equal(created, got) {
		t.Fatalf("CreateTask returned what GetTask does not read (-created +read):\n%s", cmp.Diff(created, got))
	}

	task := claim(t, l, "w1", 30*time.Second)
	if task.ID != created.ID || task.Status != ratelimit.TaskRunning || task.Worker != "w1" || task.AttemptCount != 1 ||
		task.ExecutionToken == "" || task.AttemptID == "" || !task.LeaseExpiresAt.After(task.CreatedAt) {
		t.Fatalf("claimed task = %+v", task)
	}
	if string(task.Payload) != `{"model": "m"}` || task.Kind != "chat" {
		t.Fatalf("claimed payload %s kind %q", task.Payload, task.Kind)
	}
	if _, err := l.ClaimTask(ctx, "w2", 0); !errors.Is(err, ratelimit.ErrNoTask) {
		t.Fatalf("second ClaimTask: %v, want ErrNoTask", err)
	}

	until, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, 60*time.Second)
	if err != nil {
		t.Fatalf("HeartbeatTask: %v", err)
	}
	if !until.After(task.LeaseExpiresAt) {
		t.Fatalf("heartbeat moved the lease to %s, not past %s", until, task.LeaseExpiresAt)
	}

	key := uniqueKey("k")
	grant, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricTokens, 1000, 100), concurrent("model", key, 2),
	})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 70}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: 50}); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}

	res, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if res.ReleasedReservations != 0 || res.ReleasedLeases != 0 || res.DeletedAdmissions != 1 {
		t.Fatalf("FinishTask result = %+v, want 0 reservations, 0 leases (committed before), 1 admission", res)
	}
	if res.Task.Status != ratelimit.TaskSucceeded || res.Task.FinishedAt.IsZero() || res.Task.ExecutionToken != "" || res.Task.LastEventSeq != 4 {
		t.Fatalf("finished task = %+v", res.Task)
	}
	if diff := cmp.Diff([]string{"task.queued", "task.running", "task.progress", "task.completed"}, eventTypes(t, l, task.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"succeeded/"}, attemptStates(t, l, task.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}

	// The finished claim is void.
	_, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed})
	if stale := asStale(t, err); stale.Status != ratelimit.TaskSucceeded {
		t.Fatalf("second FinishTask: %+v", stale)
	}
	_, err = l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, 0)
	asStale(t, err)

	s := summary(t, pool)
	if s.TasksSucceeded != 1 || s.Admissions != 0 || s.AttemptsRunning != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 || s.CountersUsed != 70 {
		t.Fatalf("summary after finish = %+v", s)
	}
	assertDoctorOK(t, pool)
}

func TestTaskSyncFinishReleasesWhatIsOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)

	task := startSync(t, l, 30*time.Second, queueLimit("q", 1))
	if task.Status != ratelimit.TaskRunning || task.Worker != "w-sync" || task.AttemptCount != 1 || task.AttemptID == "" || task.ExecutionToken == "" {
		t.Fatalf("sync task = %+v, want running with a claim", task)
	}
	if got := getTask(t, l, task.ID); !cmp.Equal(task, got) {
		t.Fatalf("CreateTask returned what GetTask does not read (-created +read):\n%s", cmp.Diff(task, got))
	}
	key := uniqueKey("k")
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
		window("api_key", key, ratelimit.MetricRequests, 10, 1),
		window("api_key", key, ratelimit.MetricTokens, 1000, 300),
		concurrent("model", key, 1),
	}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}

	res, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{
		Status: ratelimit.TaskFailed, ErrorCode: "upstream_timeout", ErrorMessage: "model timed out",
		Error: json.RawMessage(`{"after_ms": 30000}`), Retryable: true,
	})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if res.ReleasedReservations != 2 || res.ReleasedLeases != 1 || res.DeletedAdmissions != 1 {
		t.Fatalf("FinishTask result = %+v, want 2 reservations, 1 lease, 1 admission released", res)
	}
	got := getTask(t, l, task.ID)
	if got.Status != ratelimit.TaskFailed || got.ErrorCode != "upstream_timeout" || got.ErrorMessage != "model timed out" || string(got.Error) != `{"after_ms": 30000}` {
		t.Fatalf("failed task = %+v", got)
	}
	if diff := cmp.Diff([]string{"task.running", "task.failed"}, eventTypes(t, l, task.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"failed/upstream_timeout"}, attemptStates(t, l, task.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
	s := summary(t, pool)
	if s.ReservationsReleased != 2 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 || s.CountersUsed != 0 || s.Admissions != 0 {
		t.Fatalf("summary after finish = %+v", s)
	}
	// The queue place is free again.
	startSync(t, l, 0, queueLimit("q", 1))
	assertDoctorOK(t, pool)
}

func TestTaskCancelOutcome(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	createAsync(t, l)
	task := claim(t, l, "w", 0)
	res, err := l.FinishTask(context.Background(), task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskCancelled, ErrorMessage: "user cancelled"})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if res.Task.Status != ratelimit.TaskCancelled || res.Task.ErrorMessage != "user cancelled" {
		t.Fatalf("cancelled task = %+v", res.Task)
	}
	if diff := cmp.Diff([]string{"task.queued", "task.running", "task.cancelled"}, eventTypes(t, l, task.ID)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cancelled/"}, attemptStates(t, l, task.ID)); diff != "" {
		t.Fatalf("attempts (-want +got):\n%s", diff)
	}
}

func TestTaskClaimOrderAndSkipLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4)
	l := ratelimit.New(pools[0])
	const tasks = 40
	want := map[string]bool{}
	for range tasks {
		want[createAsync(t, l).ID] = true
	}
	startSync(t, l, 0) // sync tasks are never claimable

	// 8 workers over 4 pools drain the queue: each task is claimed exactly once.
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			wl := ratelimit.New(pools[w%4])
			for {
				task, err := wl.ClaimTask(ctx, "worker", 0)
				if errors.Is(err, ratelimit.ErrNoTask) {
					return
				}
				if err != nil {
					t.Errorf("ClaimTask: %v", err)
					return
				}
				mu.Lock()
				got[task.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != tasks {
		t.Fatalf("claimed %d distinct tasks, want %d", len(got), tasks)
	}
	for id, n := range got {
		if n != 1 || !want[id] {
			t.Fatalf("task %s claimed %d times (created by this test: %v)", id, n, want[id])
		}
	}
	if s := summary(t, pools[0]); s.TasksRunning != tasks+1 || s.AttemptsRunning != tasks+1 || s.TasksQueued != 0 {
		t.Fatalf("summary = %+v", s)
	}
}

func TestQueueAdmissionIsExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4)
	const limit, callers = 10, 64

	var mu sync.Mutex
	var admitted []ratelimit.Task
	var refused []*ratelimit.ExceededError
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			l := ratelimit.New(pools[i%4])
			<-start
			// Both scopes list the same queues, in opposite orders: no deadlock.
			queues := []ratelimit.Limit{queueLimit("a", limit), queueLimit("b", 1000)}
			if i%2 == 1 {
				queues[0], queues[1] = queues[1], queues[0]
			}
			task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: i%3 != 0, Worker: map[bool]string{true: "w"}[i%3 == 0], QueueLimits: queues})
			mu.Lock()
			defer mu.Unlock()
			var exceeded *ratelimit.ExceededError
			switch {
			case err == nil:
				admitted = append(admitted, task)
			case errors.As(err, &exceeded):
				refused = append(refused, exceeded)
			default:
				t.Errorf("CreateTask: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(admitted) != limit || len(refused) != callers-limit {
		t.Fatalf("admitted %d, refused %d; want %d and %d", len(admitted), len(refused), limit, callers-limit)
	}
	for _, e := range refused {
		want := ratelimit.ExceededError{
			ScopeType: "queue", ScopeKey: "a", Metric: ratelimit.MetricQueueSize, Limit: limit, Amount: 1,
			Current: limit, Used: limit, Projected: limit + 1, Retryable: true,
			Message: "rate limit exceeded: queue queue:a holds 10 of 10 tasks; retry when one finishes",
		}
		if diff := cmp.Diff(want, *e); diff != "" {
			t.Fatalf("refusal (-want +got):\n%s", diff)
		}
		if !errors.Is(e, ratelimit.ErrExceeded) {
			t.Fatalf("refusal does not match ErrExceeded")
		}
	}
	counts := rowCounts(t, pools[0])
	if counts.Tasks != limit || counts.Admissions != 2*limit || counts.Events != limit {
		t.Fatalf("rows after the race = %+v, want %d tasks, %d admissions, %d events (nothing written on refusal)", counts, limit, 2*limit, limit)
	}

	// Finishing one task frees exactly one place.
	l := ratelimit.New(pools[0])
	var running ratelimit.Task
	for _, task := range admitted {
		if !task.Async {
			running = task
			break
		}
	}
	if running.ID == "" {
		running = claim(t, l, "w", 0)
	}
	if _, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	createAsync(t, l, queueLimit("a", limit))
	var exceeded *ratelimit.ExceededError
	if _, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("a", limit)}}); !errors.As(err, &exceeded) {
		t.Fatalf("CreateTask past the limit: %v, want *ExceededError", err)
	}
}

func TestQueueRefusalWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	createAsync(t, l, queueLimit("full", 1))
	before := rowCounts(t, pool)

	// The second queue is full: the first must not keep a place either.
	_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("free", 5), queueLimit("full", 1)}})
	var exceeded *ratelimit.ExceededError
	if !errors.As(err, &exceeded) || exceeded.ScopeKey != "full" || exceeded.Current != 1 || !exceeded.Retryable {
		t.Fatalf("CreateTask = %v, want a retryable refusal on queue:full", err)
	}
	// A limit of 0 admits nothing and retrying cannot help.
	_, err = l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("closed", 0)}})
	if !errors.As(err, &exceeded) || exceeded.ScopeKey != "closed" || exceeded.Retryable {
		t.Fatalf("CreateTask on a closed queue = %v, want a refusal that is not retryable", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Fatalf("refusals wrote rows (-before +after):\n%s", diff)
	}
}

func TestTaskInputValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	existing := startSync(t, l, 0)
	before := rowCounts(t, pool)
	q := queueLimit("q", 3)
	with := func(f func(*ratelimit.Limit)) []ratelimit.Limit { c := q; f(&c); return []ratelimit.Limit{c} }

	createCases := []struct {
		name  string
		spec  ratelimit.TaskSpec
		field string
	}{
		{"sync without worker", ratelimit.TaskSpec{}, "Worker"},
		{"async with worker", ratelimit.TaskSpec{Async: true, Worker: "w"}, "Worker"},
		{"async with lease", ratelimit.TaskSpec{Async: true, LeaseTTL: time.Second}, "LeaseTTL"},
		{"sync lease not whole seconds", ratelimit.TaskSpec{Worker: "w", LeaseTTL: 1500 * time.Millisecond}, "LeaseTTL"},
		{"sync lease negative", ratelimit.TaskSpec{Worker: "w", LeaseTTL: -time.Second}, "LeaseTTL"},
		{"sync lease too long", ratelimit.TaskSpec{Worker: "w", LeaseTTL: 48 * time.Hour}, "LeaseTTL"},
		{"payload not JSON", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`{`)}, "Payload"},
		{"payload with a NUL escape", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`{"a":"x\u0000y"}`)}, "Payload"},
		{"payload with a NUL escape in a key", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`{"\u0000":1}`)}, "Payload"},
		{"payload with a NUL escape after an escaped backslash", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`["\\\u0000"]`)}, "Payload"},
		{"payload with a lone high surrogate", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`"\ud800"`)}, "Payload"},
		{"payload with a lone low surrogate", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`"\udc00"`)}, "Payload"},
		{"payload with a high surrogate before another escape", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`"\ud83d\n"`)}, "Payload"},
		{"payload not UTF-8", ratelimit.TaskSpec{Async: true, Payload: json.RawMessage("\"\xff\"")}, "Payload"},
		{"payload over MaxPayloadBytes", ratelimit.TaskSpec{Async: true, Payload: jsonString(ratelimit.MaxPayloadBytes - 1)}, "Payload"},
		{"kind with NUL", ratelimit.TaskSpec{Async: true, Kind: "a\x00b"}, "Kind"},
		{"queue without scope type", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Scope.Type = "" })}, "QueueLimits[0].Scope.Type"},
		{"queue without scope key", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Scope.Key = " " })}, "QueueLimits[0].Scope.Key"},
		{"queue with window metric", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Metric = ratelimit.MetricRequests })}, "QueueLimits[0].Metric"},
		{"queue limit fractional", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Limit = 2.5 })}, "QueueLimits[0].Limit"},
		{"queue limit negative", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Limit = -1 })}, "QueueLimits[0].Limit"},
		{"queue amount 2", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Amount = 2 })}, "QueueLimits[0].Amount"},
		{"queue with window", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Window = time.Minute })}, "QueueLimits[0].Window"},
		{"queue with lease", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.LeaseTTL = time.Minute })}, "QueueLimits[0].LeaseTTL"},
		{"queue Local", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Local = true })}, "QueueLimits[0].Local"},
		{"queue Local, no metric", ratelimit.TaskSpec{Async: true, QueueLimits: with(func(l *ratelimit.Limit) { l.Metric, l.Local = "", true })}, "QueueLimits[0].Local"},
		{"queue twice", ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{q, q}}, "QueueLimits[1]"},
	}
	for _, tc := range createCases {
		_, err := l.CreateTask(ctx, tc.spec)
		assertValidation(t, tc.name, err, tc.field)
	}

	token := existing.ExecutionToken
	callCases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"claim without worker", func() error { _, err := l.ClaimTask(ctx, "", 0); return err }, "workerID"},
		{"claim lease sub-second", func() error { _, err := l.ClaimTask(ctx, "w", time.Millisecond); return err }, "leaseTTL"},
		{"heartbeat bad id", func() error { _, err := l.HeartbeatTask(ctx, "nope", token, 0); return err }, "taskID"},
		{"heartbeat bad token", func() error { _, err := l.HeartbeatTask(ctx, existing.ID, "nope", 0); return err }, "token"},
		{"heartbeat negative ttl", func() error { _, err := l.HeartbeatTask(ctx, existing.ID, token, -time.Second); return err }, "ttl"},
		{"finish no status", func() error { _, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{}); return err }, "Outcome.Status"},
		{"finish running", func() error {
			_, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{Status: ratelimit.TaskRunning})
			return err
		}, "Outcome.Status"},
		{"finish success with error", func() error {
			_, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{Status: ratelimit.TaskSucceeded, ErrorCode: "x"})
			return err
		}, "Outcome"},
		{"finish error not JSON", func() error {
			_, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: json.RawMessage(`nope`)})
			return err
		}, "Outcome.Error"},
		{"finish error with a NUL escape", func() error {
			_, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: json.RawMessage(`{"detail":"\u0000"}`)})
			return err
		}, "Outcome.Error"},
		{"finish error over MaxPayloadBytes", func() error {
			_, err := l.FinishTask(ctx, existing.ID, token, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: jsonString(ratelimit.MaxPayloadBytes - 1)})
			return err
		}, "Outcome.Error"},
		{"event with a malformed token", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, "nope", ratelimit.Event{Type: "x"})
			return err
		}, "token"},
		{"event without type", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{})
			return err
		}, "Event.Type"},
		{"event NaN progress", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{Type: "x", Progress: math.NaN()})
			return err
		}, "Event.Progress"},
		{"event payload not JSON", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{Type: "x", Payload: json.RawMessage(`[`)})
			return err
		}, "Event.Payload"},
		{"event payload with a NUL escape", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{Type: "x", Payload: json.RawMessage(`["\u0000"]`)})
			return err
		}, "Event.Payload"},
		{"event payload over MaxPayloadBytes", func() error {
			_, err := l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{Type: "x", Payload: jsonString(ratelimit.MaxPayloadBytes - 1)})
			return err
		}, "Event.Payload"},
	}
	for _, tc := range callCases {
		assertValidation(t, tc.name, tc.call(), tc.field)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Fatalf("invalid input wrote rows (-before +after):\n%s", diff)
	}
	if got := getTask(t, l, existing.ID); got.LastEventSeq != 1 || got.Status != ratelimit.TaskRunning {
		t.Fatalf("task touched by invalid calls: %+v", got)
	}
}

// TestTaskJSONThatLooksLikeANulEscape stores JSON that holds the text
// \u0000 or other escapes jsonb accepts: the check for the NUL escape must
// count backslashes, not look for the six characters.
func TestTaskJSONThatLooksLikeANulEscape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	for _, payload := range []string{
		`"\\u0000"`,                  // an escaped backslash, then the text u0000
		`{"\\\\u0000":"u0000"}`,      // two escaped backslashes, then u0000
		`"\u0001\ud83d\ude00\u00e9"`, // a control character, a surrogate pair, é
		`"\"\\\/\b\f\n\r\t"`,         // every other escape
	} {
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatalf("CreateTask(%s): %v", payload, err)
		}
		if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "x", Payload: json.RawMessage(payload)}); err != nil {
			t.Fatalf("AppendEvent(%s): %v", payload, err)
		}
		res, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: json.RawMessage(payload)})
		if err != nil {
			t.Fatalf("FinishTask(%s): %v", payload, err)
		}
		var want, got any
		if err := json.Unmarshal([]byte(payload), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(res.Task.Error, &got); err != nil {
			t.Fatalf("stored error %s: %v", res.Task.Error, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("stored %s as %s (-want +got):\n%s", payload, res.Task.Error, diff)
		}
	}
}

// TestTaskJSONNumbersOutsideNumericAreRefused: jsonb stores numbers as
// numeric and refuses those outside its range (SQLSTATE 22003), which
// json.Valid accepts. CreateTask, AppendEvent and FinishTask refuse them
// with a *ValidationError naming the field before anything is sent: nothing
// is written, and inside a caller's transaction the transaction stays
// usable. Numbers at numeric's limits are stored.
func TestTaskJSONNumbersOutsideNumericAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	existing := startSync(t, l, 0)
	before := rowCounts(t, pool)
	refused := []string{
		`{"n":1e200000}`,
		`[1e-20000]`,
		`100e-16385`,
		`{"a":["1e200000",1e131072]}`, // 131073 digits before the point
		`[1e-16384]`,                  // 16384 after it
		`{"zero":0e1073741823}`,       // an exponent numeric_in refuses even for zero
	}
	refuseAll := func(l *ratelimit.Limiter, where string) {
		t.Helper()
		for _, doc := range refused {
			raw := json.RawMessage(doc)
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Payload: raw})
			assertValidation(t, where+"CreateTask payload "+doc, err, "Payload")
			_, err = l.AppendEvent(ctx, existing.ID, existing.ExecutionToken, ratelimit.Event{Type: "x", Payload: raw})
			assertValidation(t, where+"AppendEvent payload "+doc, err, "Event.Payload")
			_, err = l.FinishTask(ctx, existing.ID, existing.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: raw})
			assertValidation(t, where+"FinishTask error "+doc, err, "Outcome.Error")
		}
	}

	refuseAll(l, "")
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Fatalf("refused input wrote rows (-before +after):\n%s", diff)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	refuseAll(l.WithTx(tx), "WithTx: ")
	if _, err := testq.OpsNow(ctx, tx); err != nil {
		t.Fatalf("the caller's transaction is unusable after the refused calls: %v", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, tx)); diff != "" {
		t.Fatalf("refused input wrote rows in the transaction (-before +after):\n%s", diff)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := getTask(t, l, existing.ID); got.LastEventSeq != 1 || got.Status != ratelimit.TaskRunning {
		t.Fatalf("task touched by refused calls: %+v", got)
	}

	const limits = `[1e131071, -9.9e131071, 0.1e131072, 1e-16383, 100e-16383, 0e-16383, 0e1073741822]`
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", Payload: json.RawMessage(limits)})
	if err != nil {
		t.Fatalf("CreateTask with numbers at numeric's limits: %v", err)
	}
	if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "x", Payload: json.RawMessage(limits)}); err != nil {
		t.Fatalf("AppendEvent with numbers at numeric's limits: %v", err)
	}
	if _, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: json.RawMessage(limits)}); err != nil {
		t.Fatalf("FinishTask with numbers at numeric's limits: %v", err)
	}
}

func assertValidation(t *testing.T, name string, err error, field string) {
	t.Helper()
	var v *ratelimit.ValidationError
	if !errors.As(err, &v) || !errors.Is(err, ratelimit.ErrInvalidInput) {
		t.Errorf("%s: error %v, want a *ValidationError", name, err)
		return
	}
	if v.Field != field {
		t.Errorf("%s: ValidationError.Field = %q, want %q (%v)", name, v.Field, field, v)
	}
}

func TestTaskUnknownAndStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	const ghost = "00000000-0000-4000-8000-000000000000"
	if _, err := l.GetTask(ctx, ghost); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("GetTask(ghost): %v", err)
	}
	if _, err := l.HeartbeatTask(ctx, ghost, ghost, 0); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("HeartbeatTask(ghost): %v", err)
	}
	if _, err := l.FinishTask(ctx, ghost, ghost, ratelimit.Outcome{Status: ratelimit.TaskFailed}); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("FinishTask(ghost): %v", err)
	}
	if _, err := l.AppendEvent(ctx, ghost, ghost, ratelimit.Event{Type: "x"}); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("AppendEvent(ghost): %v", err)
	}

	queued := createAsync(t, l)
	_, err := l.HeartbeatTask(ctx, queued.ID, ghost, 0)
	if stale := asStale(t, err); stale.Status != ratelimit.TaskQueued {
		t.Fatalf("heartbeat of a queued task: %+v", stale)
	}
	task := claim(t, l, "w", 0)
	_, err = l.FinishTask(ctx, task.ID, ghost, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if stale := asStale(t, err); stale.Status != ratelimit.TaskRunning || stale.TaskID != task.ID {
		t.Fatalf("finish with a wrong token: %+v", stale)
	}
	if got := getTask(t, l, task.ID); got.Status != ratelimit.TaskRunning || got.LastEventSeq != 2 {
		t.Fatalf("a refused finish changed the task: %+v", got)
	}
}

// TestFinishTaskStaleBetweenRoundTripsReportsCurrentStatus: when the token
// goes stale between FinishTask's two round trips (here the same token
// finishes the task concurrently), the *StaleTokenError reports the task's
// status when the call was refused (succeeded), not the running status its
// first round trip saw.
func TestFinishTaskStaleBetweenRoundTripsReportsCurrentStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	task := startSync(t, l, time.Minute)
	key := uniqueKey("k")
	if _, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{window("key", key, "requests", 100, 1)}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	// Hold the reservation's counter: both finishes read their plan (the
	// task running, the token current), then wait for it in their batch.
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if n, err := testq.OpsLockScopeCounters(ctx, blocker, dbtest.OpsLockScopeCountersParams{ScopeType: "key", ScopeKey: key}); err != nil || n == 0 {
		t.Fatalf("OpsLockScopeCounters: %d rows, %v", n, err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			errs <- err
		}()
	}
	pgtest.AwaitLockWaiterCount(t, pool, 2, "the two finishes, on the counter,")
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var stale *ratelimit.StaleTokenError
	for range 2 {
		if err := <-errs; err != nil {
			if s := asStale(t, err); stale != nil {
				t.Fatalf("both finishes were refused: %v; %v", stale, s)
			} else {
				stale = s
			}
		}
	}
	if stale == nil {
		t.Fatal("both finishes succeeded")
	}
	got := getTask(t, l, task.ID)
	if got.Status != ratelimit.TaskSucceeded || stale.Status != got.Status || stale.TaskID != task.ID {
		t.Fatalf("StaleTokenError %+v, but the task was %q when the call was refused", stale, got.Status)
	}
}

func TestAppendEventSequencesUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := pgtest.NewPools(t, 4)
	l := ratelimit.New(pools[0])
	task := startSync(t, l, time.Minute)
	const writers, each = 64, 20

	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			wl := ratelimit.New(pools[w%4])
			<-start
			for i := range each {
				e, err := wl.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: float64(i), Payload: json.RawMessage(`{"w":1}`)})
				if err != nil {
					t.Errorf("AppendEvent: %v", err)
					return
				}
				mu.Lock()
				if seen[e.Seq] {
					t.Errorf("seq %d allocated twice", e.Seq)
				}
				seen[e.Seq] = true
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	const total = writers*each + 1 // + task.running at creation
	events, err := l.TaskEvents(ctx, task.ID)
	if err != nil {
		t.Fatalf("TaskEvents: %v", err)
	}
	if len(events) != total {
		t.Fatalf("%d events, want %d", len(events), total)
	}
	for i, e := range events {
		if e.Seq != i+1 {
			t.Fatalf("event %d has seq %d: gap or repeat", i, e.Seq)
		}
	}
	if got := getTask(t, l, task.ID); got.LastEventSeq != total {
		t.Fatalf("last_event_seq = %d, want %d", got.LastEventSeq, total)
	}
	counts, err := testq.TableRowCounts(ctx, pools[1])
	if err != nil || counts.Events != total {
		t.Fatalf("TableRowCounts = %+v, %v; want %d events", counts, err, total)
	}
}

// A heartbeat that waits for the task row while FinishTask holds it is
// refused once the finish commits, and reports the task as it is then
// (StaleTokenError.Status is the status when the call was refused), as
// FinishTask does: not "running", as the heartbeat's statement saw it when
// it started.
func TestHeartbeatStaleWhileWaitingReportsCurrentStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	task := startSync(t, l, time.Minute)
	finisher, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = finisher.Rollback(ctx) }()
	if _, err := l.WithTx(finisher).FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskCancelled}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	beat := make(chan error, 1)
	go func() {
		_, err := l.HeartbeatTask(ctx, task.ID, task.ExecutionToken, time.Minute)
		beat <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "HeartbeatTask")
	if err := finisher.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stale := asStale(t, <-beat)
	if stale.Status != ratelimit.TaskCancelled || stale.TaskID != task.ID {
		t.Fatalf("StaleTokenError %+v, but the task was %q when the call was refused", stale, ratelimit.TaskCancelled)
	}
}
