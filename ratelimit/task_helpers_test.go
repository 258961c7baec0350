package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// queueLimit is a queue_size limit of n tasks on queue:key.
func queueLimit(key string, n float64) ratelimit.Limit {
	return ratelimit.Limit{Scope: ratelimit.Scope{Type: "queue", Key: key}, Metric: ratelimit.MetricQueueSize, Limit: n}
}

// createAsync creates an async task, failing the test on error.
func createAsync(t *testing.T, l *ratelimit.Limiter, queues ...ratelimit.Limit) ratelimit.Task {
	t.Helper()
	task, err := l.CreateTask(context.Background(), ratelimit.TaskSpec{Async: true, Kind: "test", QueueLimits: queues})
	if err != nil {
		t.Fatalf("CreateTask(async): %v", err)
	}
	return task
}

// startSync creates a sync task, running, with the given execution lease.
func startSync(t *testing.T, l *ratelimit.Limiter, ttl time.Duration, queues ...ratelimit.Limit) ratelimit.Task {
	t.Helper()
	task, err := l.CreateTask(context.Background(), ratelimit.TaskSpec{Kind: "test", Worker: "w-sync", LeaseTTL: ttl, QueueLimits: queues})
	if err != nil {
		t.Fatalf("CreateTask(sync): %v", err)
	}
	return task
}

// claim claims the next task, failing the test when there is none.
func claim(t *testing.T, l *ratelimit.Limiter, worker string, ttl time.Duration) ratelimit.Task {
	t.Helper()
	task, err := l.ClaimTask(context.Background(), worker, ttl)
	if err != nil {
		t.Fatalf("ClaimTask(%s): %v", worker, err)
	}
	return task
}

// summary reads the totals of the live state and the books.
func summary(t *testing.T, conn db.DBTX) dbtest.OpsStateSummaryRow {
	t.Helper()
	s, err := testq.OpsStateSummary(context.Background(), conn)
	if err != nil {
		t.Fatalf("OpsStateSummary: %v", err)
	}
	return s
}

// waitPast polls the database's clock until it is past at (windows are
// judged on that clock, not the test's). Only for what the tests cannot
// drive: Reserve decides on the database's own now().
func waitPast(t *testing.T, conn dbtest.DBTX, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !pgtest.DBNow(t, conn).After(at) {
		if time.Now().After(deadline) {
			t.Fatalf("database clock never passed %s", at)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testClock drives the statements that take an optional now: it reads the
// real time plus an offset that only grows, so time never runs backwards
// and what Reserve writes on the database's own clock stays in step.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// pass moves the clock just past at, as if the test had slept until then.
func (c *testClock) pass(at time.Time) {
	for {
		cur := c.offset.Load()
		want := int64(time.Until(at) + time.Millisecond)
		if want <= cur || c.offset.CompareAndSwap(cur, want) {
			return
		}
	}
}

// advance moves the clock d ahead of where it is.
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// clocked returns a Limiter and a Maintenance on pool that both read the
// test clock c (maintenance options apply to the Maintenance).
func clocked(pool *pgxpool.Pool, c *testClock, opts ...ratelimit.MaintenanceOption) (*ratelimit.Limiter, *ratelimit.Maintenance) {
	opts = append([]ratelimit.MaintenanceOption{ratelimit.WithMaintenanceClock(c.now)}, opts...)
	return ratelimit.New(pool, ratelimit.WithClock(c.now)), ratelimit.NewMaintenance(pool, opts...)
}

// eventTypes lists the types of a task's events, in order, checking that
// their sequence numbers are 1..n.
func eventTypes(t *testing.T, l *ratelimit.Limiter, taskID string) []string {
	t.Helper()
	events, err := l.TaskEvents(context.Background(), taskID)
	if err != nil {
		t.Fatalf("TaskEvents: %v", err)
	}
	types := make([]string, len(events))
	for i, e := range events {
		if e.Seq != i+1 {
			t.Fatalf("event %d of task %s has seq %d", i, taskID, e.Seq)
		}
		types[i] = e.Type
	}
	return types
}

// attemptStates lists "status/error_code" of a task's attempts, in order.
func attemptStates(t *testing.T, l *ratelimit.Limiter, taskID string) []string {
	t.Helper()
	attempts, err := l.TaskAttempts(context.Background(), taskID)
	if err != nil {
		t.Fatalf("TaskAttempts: %v", err)
	}
	states := make([]string, len(attempts))
	for i, a := range attempts {
		if a.Number != i+1 {
			t.Fatalf("attempt %d of task %s has number %d", i, taskID, a.Number)
		}
		states[i] = a.Status + "/" + a.ErrorCode
	}
	return states
}

// getTask reads a task.
func getTask(t *testing.T, l *ratelimit.Limiter, id string) ratelimit.Task {
	t.Helper()
	task, err := l.GetTask(context.Background(), id)
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return task
}

// assertDoctorOK fails the test with the report when the books do not
// balance (judged on the database's clock).
func assertDoctorOK(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	report, err := ratelimit.NewMaintenance(pool).Doctor(context.Background())
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	if !report.OK() {
		t.Fatalf("%s", report)
	}
}

// asStale returns err as a *StaleTokenError, failing the test otherwise.
func asStale(t *testing.T, err error) *ratelimit.StaleTokenError {
	t.Helper()
	var stale *ratelimit.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, ratelimit.ErrStaleToken) {
		t.Fatalf("error %v is not a *StaleTokenError", err)
	}
	return stale
}

// mustUUID parses an id for a generated query's parameter.
func mustUUID(t *testing.T, s string) pgtype.UUID {
	t.Helper()
	var u pgtype.UUID
	if err := u.Scan(s); err != nil {
		t.Fatalf("parse uuid %q: %v", s, err)
	}
	return u
}

// jsonString is a JSON string of n bytes of text: n+2 bytes with its quotes.
func jsonString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n) + `"`)
}
