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
	// left 3 row(s): another transaction held a lock past the lock timeout: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)
}
