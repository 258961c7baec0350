// Package ratelimit is pgadmit's admission control: the flows a gateway
// runs around every upstream call, composed from the generated queries in
// package db and kept in PostgreSQL so that many gateway instances share
// exact limits.
//
// A Limiter admits a request against window limits (requests, tokens, cost
// per fixed window) and concurrent limits (leases on in-flight slots), all
// or nothing, in one round trip:
//
//	limiter := ratelimit.New(pool) // one for the process
//	defer limiter.Close()          // at shutdown, before pool.Close: gives back what it holds
//	grant, err := limiter.Reserve(ctx, taskID, "", limits)
//	var exceeded *ratelimit.ExceededError
//	if errors.As(err, &exceeded) {
//		return err // refused: 429 with Retry-After: exceeded.RetryAfter
//	}
//	if err != nil {
//		return err // not decided (the database is down, say)
//	}
//	// ... call the upstream ...
//	_, err = limiter.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: usedTokens})
//	return err
//
// Tasks (CreateTask, ClaimTask, HeartbeatTask, FinishTask, CancelTask) tie
// admissions to work that a process runs, with queue_size limits enforced
// at creation.
// Housekeeping runs on a Maintenance, built from a pool (never a
// transaction): when a process dies, Recover gives its capacity back; Prune,
// with Recover, keeps the tables bounded; Doctor checks that every counter
// equals its ledger. Nothing keeps session state, so all of it works through a
// transaction-pooling proxy such as PgBouncer given pgx's exec mode "exec"
// (CheckPooler tells); not through one that pools by statement.
//
// # How admission stays exact and cheap
//
// Reserve is one statement: a call of the PL/pgSQL function
// pgadmit_reserve (its typed call is AdmissionReserve in
// queries/admission.sql, whose overview names the migration that defines
// the body in force), which the server runs as one implicit transaction.
// A lone admission of one window limit calls pgadmit_reserve_one instead,
// and a combined batch of task-less one-window admissions
// pgadmit_reserve_windows, which decide the same in fewer statements.
// It locks the current windows' counter rows FOR
// UPDATE in primary-key order (creating missing ones), takes advisory locks
// on the concurrency scopes in key order, decides, and writes. Every
// statement in the function is a primary-key probe or an insert of the rows
// just decided, so PostgreSQL plans each once per session and reuses the
// plan. The sorted lock order makes admissions deadlock-free whatever order
// callers list limits in, and row locks are held only while the server
// executes the call, never across a network round trip. Commit and Release
// are one call of pgadmit_settle (pgadmit_settle_one for a lone grant of one
// reservation and no lease), which locks the counters of the grant's reservations in
// the same order.
//
// Every time-derived value (window bounds, lease expiry, reset time,
// retry-after) comes from the database's clock.
//
// # Local allotments
//
// A window limit with Local set is admitted from a block of its window's
// units that the Limiter took in advance, in memory, with no round trip
// (an admission for a task reads its task and attempt, to be fenced to
// them, as Reserve says). A block is one row of
// gateway_rate_limit_allotments (an allotment, as the API's names call it:
// Reservation.Allotment, AllotmentOptions, WithAllotments,
// RecoveryResult.ReturnedAllotments), and its granted
// units are reserved in the window's counter, so all processes together
// never admit more than the limit; no reservation row is written per
// request (the Reservation has Local set, no ID, and names its block in
// Allotment), and Commit and Release of it are in memory. A block is sized
// to what this process admitted on the counter in AllotmentOptions.Horizon
// (16 times the request before a rate is known), at most MaxShare of the
// limit and, unless the request waiting for it needs more, at most half of
// what the window has free; it admits only requests whose limit is at
// least the one it was taken under. The next block is taken ahead, in the
// background, when the current one is half spent, unless at the rate the
// process admits the current one would last until its window stops
// admitting; a block set aside for want of room is trimmed to what it
// admitted, and again as what it admitted settles below its estimates.
//
// A block is returned, its units leaving reserved_value and what it
// admitted entering used_value (actual amounts of committed requests, an
// actual above its estimate in full; estimates of requests still in
// flight), when its window ends (it stops admitting Margin before that on
// the database's clock), when it is idle, and on Close. A request still in
// flight then (on Close, or a minute after its window ended) stays charged
// at its estimate: its later Commit or Release changes nothing, and its
// Settlement says so (Settled false, committed at the estimate). A return
// that fails is tried again on the next round (every 100 ms) and by Close;
// a block Close could not return is left to Maintenance.Recover, as a dead
// process's is (below), and a later Commit or Release of what it admitted
// reports StatusUnknown.
// A request no block can serve is decided in the database with the
// admission's other limits. The holder reports what each open block admitted every second; a
// process that dies strands its blocks until their window ends, and
// Maintenance.Recover then returns them, charging its last report. Local
// is ignored inside a caller's transaction (WithTx) and on a Limiter made
// from a single connection (a *pgx.Conn or *pgxpool.Conn, or a type of
// one's own that embeds one), which cannot run
// the blocks' own statements alongside the caller's. The README's "Local
// allotments" says more, with measurements.
//
// # Grants
//
// Reserve returns a Grant: one Reservation per window limit and one Lease
// per concurrent limit, each named by the id of its row (a UUID). Commit
// and Release settle it, RenewLeases and ReleaseLeases take its leases,
// and Attach links it to a task's attempt; a Grant survives JSON, so
// another process may settle it. The ids are capabilities: whoever holds
// one can commit, release, renew or attach what it names, and nothing
// checks that the caller is the one Reserve answered (a Local
// reservation's LocalID is one too, on the Limiter that admitted it).
// Keep them where you would keep a session token: out of responses to
// clients and out of logs anyone else reads.
//
// # Errors
//
// Bad input returns a *ValidationError naming the field
// (errors.Is(err, ErrInvalidInput)) and writes nothing; so does a nil
// context, on "ctx". A refusal is an
// *ExceededError (errors.Is(err, ErrExceeded)). A lapsed lease is a
// *LeaseLostError (errors.Is(err, ErrLeaseLost)); a stale task token a
// *StaleTokenError (errors.Is(err, ErrStaleToken)).
package ratelimit
