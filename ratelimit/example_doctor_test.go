package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A report of two problems: a counter whose reserved value is one more
// than its open reservations hold (damage to the books: an operator's
// matter), and a finished task's reservation still open (Recover releases
// it). Built by hand; from a database it is what maint.Doctor(ctx)
// returned.
func ExampleReport_String() {
	report := ratelimit.Report{
		CheckedAt: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC),
		Problems: []ratelimit.Problem{
			{
				Kind: ratelimit.ProblemCounterReserved, ScopeType: "api_key", ScopeKey: "key_123", Metric: "tokens",
				Window: time.Minute, WindowStart: time.Date(2026, 12, 7, 7, 59, 0, 0, time.UTC),
				ExpectedText: "500", ActualText: "501",
			},
			{
				Kind: ratelimit.ProblemReservationOfFinishedTask, ScopeType: "api_key", ScopeKey: "key_123", Metric: "requests",
				TaskID: "task_1", TaskStatus: "succeeded", RowID: "res_9", ExpectedText: "0", ActualText: "1",
			},
		},
	}
	fmt.Println(report)
	// Output:
	// doctor: 2 problems
	//   counter_reserved_mismatch: api_key:key_123 tokens, window 1m from 2026-12-07T07:59:00Z: expected 500, actual 501
	//   open_reservation_of_finished_task: api_key:key_123 requests, task task_1 (succeeded), row res_9: expected 0, actual 1
}

// One problem, as Report.String lists it and the CLI prints it: its kind,
// where it is (the counter, its window, the task and the row), and the
// amounts the books should and do hold.
func ExampleProblem_String() {
	p := ratelimit.Problem{
		Kind: ratelimit.ProblemCounterUsed, ScopeType: "api_key", ScopeKey: "key_123", Metric: "tokens",
		Window: time.Hour, WindowStart: time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC),
		ExpectedText: "420", ActualText: "0.5",
	}
	fmt.Println(p)
	// Output:
	// counter_used_mismatch: api_key:key_123 tokens, window 1h from 2026-12-07T07:00:00Z: expected 420, actual 0.5
}
