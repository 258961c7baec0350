package ratelimit_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The event AppendEvent returns is the one TaskEvents reads back, its
// Payload as jsonb stores it (keys sorted, a key given twice kept once,
// numbers and spaces as jsonb writes them), as CreateTask returns a task's:
// AppendEvent returned the caller's bytes, so a worker comparing the event
// it appended with the log (to find a duplicate before retrying, as its
// doc suggests) found them different.
func TestAppendEventReturnsTheEventAsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setup(t)
	task := startSync(t, l, 0)
	appended, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{
		Type: "task.progress", Seq: 99, Progress: 1.0 / 3, Message: "halfway",
		Payload: json.RawMessage(`{"b":1,"a":[1.50,2e3],"b":2}`),
	})
	if err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}
	events, err := l.TaskEvents(ctx, task.ID)
	if err != nil {
		t.Fatalf("TaskEvents: %v", err)
	}
	stored := events[len(events)-1]
	if diff := cmp.Diff(stored, appended); diff != "" {
		t.Errorf("AppendEvent returned what TaskEvents does not read (-read +returned):\n%s", diff)
	}
	if want := `{"a": [1.50, 2000], "b": 2}`; string(appended.Payload) != want {
		t.Errorf("returned payload %s; want %s", appended.Payload, want)
	}
}
