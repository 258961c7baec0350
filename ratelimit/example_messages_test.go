package ratelimit_test

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

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
// as limiter.RenewLeases(ctx, ids, ttl) returns it.
func ExampleLeaseLostError_Error() {
	err := &ratelimit.LeaseLostError{LeaseIDs: []string{"0b6f1c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d"}, Renewed: 2}
	fmt.Println(err)
	// Output:
	// ratelimit: concurrency lease lost: 1 lease expired or released (0b6f1c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d); renewed 2
}
