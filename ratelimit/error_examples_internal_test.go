package ratelimit

import (
	"reflect"
	"testing"
	"time"
)

// ExampleExceededError_Error and ExampleStaleTokenError_Error build their
// errors by hand, with the messages the Limiter writes (their outputs are
// the samples in the docs of Error): the Limiter's own, for the same
// refusals, must be those errors, field for field, or the Examples and the
// docs show what no caller meets.
func TestErrorExamplesAreTheLimitersErrors(t *testing.T) {
	t.Parallel()
	resetAt := time.Date(2026, 12, 7, 17, 31, 0, 0, time.UTC)
	w := windowLimit{Limit: Limit{
		Scope: Scope{Type: "api_key", Key: "9f86d081884c7d65"}, Metric: MetricTokens, Limit: 100_000, Amount: 1500, Window: time.Minute,
	}, windowSeconds: 60}
	exceeded := &ExceededError{ // ExampleExceededError_Error's
		ScopeType: "api_key", ScopeKey: "9f86d081884c7d65", Metric: MetricTokens,
		Limit: 100_000, Amount: 1500, Current: 99_200, Used: 98_200, Reserved: 1000, Projected: 100_700,
		WindowSeconds: 60, ResetAt: resetAt, RetryAfter: 23 * time.Second,
		Message:   "rate limit exceeded: tokens window of api_key:9f86d081884c7d65 has 800 of 100000 left, 1500 needed; retry after 23s",
		Retryable: true,
	}
	if got := windowExceeded(w, 98_200, 1000, resetAt, resetAt.Add(-23*time.Second)); !reflect.DeepEqual(got, exceeded) {
		t.Errorf("the Limiter's refusal is\n%#v\nwhere ExampleExceededError_Error's is\n%#v", got, exceeded)
	}

	const taskID = "0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90"
	stale := &StaleTokenError{ // ExampleStaleTokenError_Error's
		TaskID: taskID, Status: TaskQueued,
		Reason: "the task is not running (finished, or reclaimed by recovery after its lease expired)",
	}
	if got := staleToken(taskID, TaskQueued); !reflect.DeepEqual(got, stale) {
		t.Errorf("the Limiter's refusal is\n%#v\nwhere ExampleStaleTokenError_Error's is\n%#v", got, stale)
	}
}
