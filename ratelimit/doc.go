// Package ratelimit is pgadmit's admission control: the flows a gateway
// runs around every upstream call, composed from the generated queries in
// package db and kept in PostgreSQL so that many gateway instances share
// exact limits.
//
// A Limiter admits a request against window limits (requests, tokens, cost
// per fixed window) and concurrent limits (leases on in-flight slots), all
// or nothing, in one round trip:
//
//	limiter := ratelimit.New(pool)
//	grant, err := limiter.Reserve(ctx, taskID, "", limits)
//	var exceeded *ratelimit.ExceededError
//	if errors.As(err, &exceeded) {
//		// 429 with Retry-After: exceeded.RetryAfter
//	}
//	// ... call the upstream ...
//	_, err = limiter.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: usedTokens})
//
// Tasks (CreateTask, ClaimTask, HeartbeatTask, FinishTask) tie admissions
// to work that a process runs, with queue_size limits enforced at creation.
// Housekeeping runs on a Maintenance, built from a pool (never a
// transaction): when a process dies, Recover gives its capacity back; Prune
// keeps the tables bounded; Doctor checks that every counter equals its
// ledger. Nothing keeps session state, so all of it works through a
// transaction-pooling proxy such as PgBouncer given pgx's exec mode "exec"
// (CheckPooler tells).
//
// # How admission stays exact and cheap
//
// Reserve is one statement: a call of the PL/pgSQL function
// pgadmit_reserve (schema/00003_admission_functions.sql; its typed call is
// AdmissionReserve in queries/admission.sql), which the server runs as one
// implicit transaction (a combined batch of task-less one-window admissions
// calls pgadmit_reserve_windows instead, which decides the same in fewer
// statements). It locks the current windows' counter rows FOR
// UPDATE in primary-key order (creating missing ones), takes advisory locks
// on the concurrency scopes in key order, decides, and writes. Every
// statement in the function is a primary-key probe or an insert of the rows
// just decided, so PostgreSQL plans each once per session and reuses the
// plan. The sorted lock order makes admissions deadlock-free whatever order
// callers list limits in, and row locks are held only while the server
// executes the call, never across a network round trip. Commit and Release
// are one call of pgadmit_settle, which locks the counters of the grant's
// reservations in the same order.
//
// Every time-derived value (window bounds, lease expiry, reset time,
// retry-after) comes from the database's clock.
//
// # Errors
//
// Bad input returns a *ValidationError naming the field
// (errors.Is(err, ErrInvalidInput)) and writes nothing. A refusal is an
// *ExceededError (errors.Is(err, ErrExceeded)). A lapsed lease is a
// *LeaseLostError (errors.Is(err, ErrLeaseLost)); a stale task token a
// *StaleTokenError (errors.Is(err, ErrStaleToken)).
package ratelimit
