package ratelimit

import (
	"errors"
	"fmt"

	"github.com/pgadmit/pgadmit/internal/poolerr"
)

// ErrPoolerMismatch is matched (errors.Is) by every *PoolerError, and by the errors of
// schema.Migrate, Down and Status that a statement-pooling proxy caused.
var ErrPoolerMismatch = poolerr.ErrMismatch

// ErrStatementPooling is matched (errors.Is) by a *PoolerError whose StatementPooling is set, and
// by the errors of schema.Migrate, Down and Status that a statement-pooling proxy caused: the
// proxy refused a transaction block (PgBouncer in pool_mode = statement closes the client
// connection with FATAL 08P01, transaction blocks not allowed in statement pooling mode).
var ErrStatementPooling = poolerr.ErrStatementPooling

// PoolerError reports a pool whose connections go through a transaction-pooling proxy (PgBouncer
// with pool_mode = transaction) while its pgx exec mode needs one server session across
// protocol messages that the proxy may send to different sessions:
//
//   - cache_statement, pgx's default, prepares a named statement in one transaction and runs it
//     in later ones: they fail intermittently with SQLSTATE 26000 (prepared statement
//     "stmtcache_..." does not exist) or 42P05 (... already exists), unless the proxy carries
//     prepared statements over (PgBouncer 1.21+ with max_prepared_statements);
//   - describe_exec describes a statement and executes it in two round trips: the second may
//     bind another client's statement (SQLSTATE 08P01, bind message supplies N parameters, but
//     prepared statement "" requires M), or one with the same parameters.
//
// A Commit that fails so leaves its leases live until their TTL. The exec, cache_describe and
// simple_protocol modes keep no such state. cache_statement meets 42P05 behind a pooler in
// session mode too when the pooler does not reset a server connection before handing it to the
// next client connection (PgBouncer with server_reset_query empty rather than DISCARD ALL).
//
// With StatementPooling set it reports, whatever the exec mode, a proxy that pools by statement
// (PgBouncer with pool_mode = statement): it runs no transaction of more than one statement,
// which a caller's transaction (Limiter.WithTx), Recover reclaiming expired tasks and
// schema.Migrate need.
//
// CheckPooler returns it when its probe sees the mismatch; every Limiter and Maintenance
// operation returns it too (wrapped: use errors.As or errors.Is with ErrPoolerMismatch) when
// it fails with the errors of cache_statement, or, with StatementPooling set, when a
// statement-pooling proxy refuses its transaction (Recover reclaiming expired tasks), so that
// the first failure says what to change. A caller's own transaction for Limiter.WithTx fails
// at the caller's Begin, with PgBouncer's error, before pgadmit sees it.
type PoolerError struct {
	// Mode is the pool's exec mode, as pgx names it in connection strings; empty when an
	// operation (not CheckPooler) reports statement pooling, which every exec mode meets.
	Mode string
	// StatementPooling is set when the proxy pools by statement.
	StatementPooling bool
	// Cause is what the probe saw.
	Cause error

	// op is the operation that met the pooler ("recover: reclaim expired tasks"), empty
	// for CheckPooler: the message names it after the package, once.
	op string
}

// Error says the problem, then what to change, then what was seen (Cause, in parentheses), on
// one line. For cache_statement it says what to change about a session pooler that does not reset
// its server connections too, when Cause is the server's error on one of pgx's stmtcache_
// statements (an operation's), which such a pooler causes as well: not when Cause is
// CheckPooler's probe seeing a session shared or moved, which a session pooler never does.
// CheckPooler's for a pool in cache_statement mode behind a transaction pooler (its Example's
// output):
//
//	ratelimit: pgx's cache_statement exec mode needs one server session per connection, which a transaction-pooling proxy does not keep: add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later with max_prepared_statements > 0 (seen: another connection's transaction ran on server session 48213, which this connection had just used, and which keeps a statement prepared by name under that name: the statement caches of the connections that share it meet each other's statements)
func (e *PoolerError) Error() string {
	prefix := "ratelimit: "
	if e.op != "" {
		prefix += e.op + ": "
	}
	// One made by hand may have no Cause, nor Mode: the message leaves them out.
	seen := ""
	if e.Cause != nil {
		seen = fmt.Sprintf(" (seen: %v)", e.Cause)
	}
	if e.StatementPooling {
		return prefix + "Limiter.WithTx, Recover and schema.Migrate need multi-statement transactions, " +
			"which a statement-pooling proxy refuses: " + poolerr.Advice + seen
	}
	mode := "pgx's exec mode"
	if e.Mode != "" {
		mode = "pgx's " + e.Mode + " exec mode"
	}
	msg := prefix + mode + " needs one server session per connection, which a transaction-pooling proxy does not keep: " +
		"add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode " +
		"to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later " +
		"with max_prepared_statements > 0"
	if e.Mode == "cache_statement" && (e.Cause == nil || poolerr.StatementCacheLost(e.Cause)) {
		// A session pooler that does not reset a server connection hands the next client
		// connection the statements of the last one: 42P05 too. Not so when the cause is
		// CheckPooler's probe seeing sessions shared or moved, which a session pooler never
		// does.
		msg += "; behind a pooler in session mode, which hands a server connection to the next client connection " +
			"with what the last one prepared, keep server_reset_query = DISCARD ALL (PgBouncer's default) instead"
	}
	return msg + seen
}

// Is makes errors.Is(err, ErrPoolerMismatch) true, and errors.Is(err, ErrStatementPooling) when
// the proxy pools by statement.
func (e *PoolerError) Is(target error) bool {
	return target == ErrPoolerMismatch || (e.StatementPooling && target == ErrStatementPooling)
}

// Unwrap returns what the probe saw.
func (e *PoolerError) Unwrap() error { return e.Cause }

// ErrPoolerUnknown is returned (wrapped) by CheckPooler when its probe could not tell whether a
// proxy between the pool and the server keeps each client connection on one server session, so
// it neither reports a mismatch nor passes. A pooler in session mode always looks so: its
// connections keep their sessions, or, when it has no server connection to spare, the probe's
// gets none.
var ErrPoolerUnknown = errors.New("ratelimit: could not tell whether the connection pooler keeps one server session per connection")
