package ratelimit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A payload of exactly MaxPayloadBytes is stored and read back whole, as a
// task's and as an event's; one byte more is refused (TestTaskInputValidation).
func TestLargestPayloadRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	largest := jsonString(ratelimit.MaxPayloadBytes - 2)
	if len(largest) != ratelimit.MaxPayloadBytes {
		t.Fatalf("payload of %d bytes; want %d", len(largest), ratelimit.MaxPayloadBytes)
	}
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w", Payload: largest})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "progress", Payload: largest}); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}
	stored, err := l.GetTask(ctx, task.ID)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	events, err := l.TaskEvents(ctx, task.ID)
	if err != nil {
		t.Fatalf("TaskEvents: %v", err)
	}
	if string(stored.Payload) != string(largest) || len(events) == 0 || string(events[len(events)-1].Payload) != string(largest) {
		t.Fatalf("read back a payload of %d bytes and %d events; want %d bytes each", len(stored.Payload), len(events), len(largest))
	}
}

// A document whose numbers jsonb writes out in full (1e131071 is 131,072
// digits when the payload is read back) is refused by the size it has as
// jsonb gives it back, not by its few bytes as sent: 9,000 such numbers,
// 90 kB, became 1.2 GB of text, and every statement that returned the
// document failed with a raw "out of memory" (SQLSTATE 54000), CreateTask
// included; an event stored so made TaskEvents fail for good. Nothing is
// written, and the task's payload and events still read back.
func TestPayloadWhoseNumbersExpandIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	task := startSync(t, l, 0)
	expands := json.RawMessage("[" + strings.Repeat("1e131071,", 9000) + "1]")
	if len(expands) > 100_000 {
		t.Fatalf("document of %d bytes; want one far under MaxPayloadBytes", len(expands))
	}
	before := rowCounts(t, pool)
	_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Payload: expands})
	assertValidation(t, "CreateTask", err, "Payload")
	_, err = l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "progress", Payload: expands})
	assertValidation(t, "AppendEvent", err, "Event.Payload")
	_, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: expands})
	assertValidation(t, "FinishTask", err, "Outcome.Error")
	if after := rowCounts(t, pool); after != before {
		t.Errorf("refusals wrote rows: %+v, then %+v", before, after)
	}
	if _, err := l.GetTask(ctx, task.ID); err != nil {
		t.Errorf("GetTask: %v", err)
	}
	if _, err := l.TaskEvents(ctx, task.ID); err != nil {
		t.Errorf("TaskEvents: %v", err)
	}
}
