// Package poolerr recognises a connection pooler that pools by statement, so that package
// ratelimit and package schema, which must not import ratelimit, report it alike: with errors
// matching the same sentinels, ratelimit.ErrPoolerMismatch and ratelimit.ErrStatementPooling,
// which are the values declared here. It also recognises pgx's statement cache meeting the
// wrong server session (StatementCacheLost), for ratelimit and the CLI.
package poolerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrMismatch is ratelimit.ErrPoolerMismatch.
	ErrMismatch = errors.New("ratelimit: the connection pooler does not keep what the pool's connections need")
	// ErrStatementPooling is ratelimit.ErrStatementPooling.
	ErrStatementPooling = errors.New("ratelimit: the connection pooler pools by statement, and pgadmit needs transactions")
)

// Advice says what to change about a pooler that pools by statement.
const Advice = "run the pooler with pool_mode = transaction (and default_query_exec_mode=exec in the " +
	"connection string) or pool_mode = session"

// MigrationsNeed says, in the error of a migration that a statement-pooling proxy refused, why
// migrating needs transactions (for Wrap).
const MigrationsNeed = "goose applies each migration in a transaction, except those marked NO TRANSACTION"

// StatementPooling reports whether err is a pooler refusing a transaction block because it pools
// by statement: PgBouncer in pool_mode = statement closes the client connection that opens one
// (a BEGIN, or a statement that leaves a transaction open) with FATAL 08P01 "transaction blocks
// not allowed in statement pooling mode". PgBouncer raises 08P01 (protocol_violation) for other
// failures too (a full pool's query_wait_timeout, a failed server login), hence the message.
func StatementPooling(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "statement pooling mode")
}

// StatementCacheLost reports whether err is pgx's statement cache meeting a server session that
// is not the one it prepared on (a transaction pooler in front of pgx's default exec mode): its
// statement missing (26000) or another client's there under the same name (42P05). pgx names the
// statements it caches "stmtcache_" and a hash of the SQL.
func StatementCacheLost(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "26000" || pgErr.Code == "42P05") &&
		strings.Contains(pgErr.Message, `"stmtcache_`)
}

// Wrap returns err itself, or, when StatementPooling(err), err saying why the operation needs a
// transaction (needs) and Advice before the pooler's refusal, matching ErrStatementPooling and ErrMismatch
// (errors.Is) and still wrapping err (errors.As finds the *pgconn.PgError).
func Wrap(err error, needs string) error {
	var wrapped *statementPoolingError
	if err == nil || !StatementPooling(err) || errors.As(err, &wrapped) { // said once
		return err
	}
	return &statementPoolingError{err: err, needs: needs}
}

type statementPoolingError struct {
	err   error
	needs string
}

// Error says the problem, then what to change, then what was seen, as a *ratelimit.PoolerError
// does: what err says before the pooler's refusal (the operation, "schema: migrate up: ")
// starts it, and the refusal and what follows it are what was seen.
func (e *statementPoolingError) Error() string {
	msg := e.err.Error()
	op, seen := "", msg
	var pgErr *pgconn.PgError
	if errors.As(e.err, &pgErr) {
		if i := strings.Index(msg, pgErr.Error()); i >= 0 {
			op, seen = msg[:i], msg[i:]
		}
	}
	return op + "the connections go through a pooler that pools by statement, which runs no transaction of " +
		"more than one statement, and " + e.needs + ": " + Advice + " (seen: " + seen + ")"
}

func (e *statementPoolingError) Is(target error) bool {
	return target == ErrStatementPooling || target == ErrMismatch
}

func (e *statementPoolingError) Unwrap() error { return e.err }
