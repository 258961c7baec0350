package ratelimit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A limit refused before anything is written: the message names the field,
// the value it was given and why it was refused. Limit.Validate needs no
// database; Reserve refuses the same limit with the same error, its field
// then named by the limit's place ("Limits[1].Amount").
func ExampleValidationError_Error() {
	digest := "9f86d081884c7d65" // your key's id, or a digest of the key: scope keys are logged
	err := ratelimit.Limit{
		Scope: ratelimit.Scope{Type: "api_key", Key: digest}, Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: -500,
	}.Validate()
	var invalid *ratelimit.ValidationError
	if errors.As(err, &invalid) {
		fmt.Println(invalid)
	}
	// Output:
	// ratelimit: invalid Amount (-500): must not be negative
}

// An operation refused inside a caller's transaction (Limiter.WithTx)
// because it would take its locks out of the global order after an earlier
// one: nothing was run, and the message says what to do instead. Built by
// hand, as the Limiter returns it for a Reserve after a CreateTask.
func ExampleLockOrderError_Error() {
	err := &ratelimit.LockOrderError{Op: "Reserve", Previous: "CreateTask"}
	fmt.Println(err)
	// Output:
	// ratelimit: Reserve after CreateTask in the same transaction could deadlock with other transactions (locks are taken counters, then concurrency scopes, then queue scopes, then rows): run it in its own transaction or before CreateTask
}

// A Recover step that gave up waiting for a lock another transaction held
// past WithMaintenanceLockTimeout: it left the rows of the batch that timed
// out for a later run, and the rest of the run still ran. Built by hand,
// with the server's error as pgx returns it; from a run it is found with
// errors.As in what maint.Recover(ctx) returned.
func ExampleLockWaitError_Error() {
	err := &ratelimit.LockWaitError{
		Job: "recover", Step: "release reservations of finished tasks", Rows: 3, Bound: 2 * time.Second,
		Err: &pgconn.PgError{Severity: "ERROR", Code: "55P03", Message: "canceling statement due to lock timeout"},
	}
	fmt.Println(err)
	// Output:
	// ratelimit: recover: release reservations of finished tasks: left 3 rows: another transaction held a lock past the lock timeout (2s): ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)
}

// A window limit that did not fit: the message names the metric, the scope
// (keyed by a digest of the API key: scope keys are logged), what the
// window has left of its limit, what was asked, and when it resets (the
// database's clock). Built by hand, as Reserve returns it for 1,500 tokens
// against an API key's 100,000 a minute with 98,200 used and 1,000
// reserved, 23 s before the window's end; ExampleExceededError turns one
// into a 429.
func ExampleExceededError_Error() {
	err := &ratelimit.ExceededError{
		ScopeType: "api_key", ScopeKey: "9f86d081884c7d65", Metric: ratelimit.MetricTokens,
		Limit: 100_000, Amount: 1500, Current: 99_200, Used: 98_200, Reserved: 1000, Projected: 100_700,
		WindowSeconds: 60, ResetAt: time.Date(2026, 12, 7, 17, 31, 0, 0, time.UTC), RetryAfter: 23 * time.Second,
		Message:   "rate limit exceeded: tokens window of api_key:9f86d081884c7d65 has 800 of 100000 left, 1500 needed; retry after 23s",
		Retryable: true,
	}
	fmt.Println(err)
	// Output:
	// rate limit exceeded: tokens window of api_key:9f86d081884c7d65 has 800 of 100000 left, 1500 needed; retry after 23s
}

// A CancelTask refused because a worker had claimed the task: the task
// goes on, and it is the worker's to finish. Built by hand, as CancelTask
// returns it.
func ExampleTaskNotQueuedError_Error() {
	err := &ratelimit.TaskNotQueuedError{TaskID: "0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90", Status: ratelimit.TaskRunning}
	fmt.Println(err)
	// Output:
	// ratelimit: cancel task 0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90: not queued (status running)
}

// A heartbeat refused because the worker's claim ended: its lease expired,
// and recovery requeued the task for another worker. The worker stops
// working on it. Built by hand, as HeartbeatTask returns it.
func ExampleStaleTokenError_Error() {
	err := &ratelimit.StaleTokenError{
		TaskID: "0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90", Status: ratelimit.TaskQueued,
		Reason: "the task is not running (finished, or reclaimed by recovery after its lease expired)",
	}
	fmt.Println(err)
	// Output:
	// ratelimit: stale execution token for task 0193a8f2-5c1e-7d4b-9a60-3f2e1b7c8d90 (status queued): the task is not running (finished, or reclaimed by recovery after its lease expired)
}

// CheckPooler's probe saw a pool in pgx's default exec mode,
// cache_statement, go through a transaction-pooling proxy (PgBouncer with
// pool_mode = transaction, before 1.21 or without max_prepared_statements):
// another connection was given the server session this one had just used.
// The message says what to change. Built by hand, as CheckPooler returns it.
func ExamplePoolerError_Error() {
	err := &ratelimit.PoolerError{
		Mode: "cache_statement",
		Cause: errors.New("another connection's transaction ran on server session 48213, which this connection had just used, " +
			"and which keeps a statement prepared by name under that name: the statement caches of the connections that share it meet each other's statements"),
	}
	fmt.Println(err)
	// Output:
	// ratelimit: pgx's cache_statement exec mode needs one server session per connection, which a transaction-pooling proxy does not keep: add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later with max_prepared_statements > 0 (seen: another connection's transaction ran on server session 48213, which this connection had just used, and which keeps a statement prepared by name under that name: the statement caches of the connections that share it meet each other's statements)
}

// A Recover step that ended with an error: the server rejected a row of
// it (a block of a Local limit damaged by hand, say), which the step set
// aside and went on without; the other steps of the run still ran. Its
// message is the step's error (errors.As finds the server's in it). Built by hand,
// with the message a run gives it; from a run it is found with errors.As
// in what maint.Recover(ctx) returned.
func ExampleStepError_Error() {
	rejected := &pgconn.PgError{Severity: "ERROR", Code: "23514",
		Message: `new row for relation "gateway_rate_limit_allotments" violates check constraint "gateway_rate_limit_allotments_amounts_check"`}
	err := &ratelimit.StepError{
		Job: "recover", Step: "return lost allotments",
		Err: fmt.Errorf("ratelimit: recover: return lost allotments: left 1 row the server rejected: %w", rejected),
	}
	fmt.Println(err)
	// Output:
	// ratelimit: recover: return lost allotments: left 1 row the server rejected: ERROR: new row for relation "gateway_rate_limit_allotments" violates check constraint "gateway_rate_limit_allotments_amounts_check" (SQLSTATE 23514)
}

// A RenewLeases whose heartbeat came too late for one lease of three: it
// expired (Recover, or a Reserve counting the scope, may have given its
// slot to another request), and the other two were renewed. Built by hand,
// as limiter.RenewLeases(ctx, grant.Leases) returns it.
func ExampleLeaseLostError_Error() {
	err := &ratelimit.LeaseLostError{LeaseIDs: []string{"0b6f1c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d"}, Renewed: 2}
	fmt.Println(err)
	// Output:
	// ratelimit: concurrency lease lost: 1 lease expired or released (0b6f1c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d); renewed 2
}
