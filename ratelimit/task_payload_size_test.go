package ratelimit_test

import (
	"context"
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
