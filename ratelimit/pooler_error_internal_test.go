package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A cache_statement *PoolerError whose cause is pgx's statement cache
// meeting the wrong session (42P05, 26000) cannot tell a transaction
// pooler from a session pooler that does not reset its server connections,
// and says what to change for both; one whose cause is CheckPooler's probe
// seeing sessions shared or moved, which a session pooler never does,
// speaks of the transaction pooler alone (ExamplePoolerError_Error), where
// it also said what to change about a session pooler.
func TestPoolerErrorNamesServerResetQueryOnlyWhenTheCauseAllowsASessionPooler(t *testing.T) {
	t.Parallel()
	const sessionAdvice = "; behind a pooler in session mode, which hands a server connection to the next client connection " +
		"with what the last one prepared, keep server_reset_query = DISCARD ALL (PgBouncer's default) instead"
	cacheLost := fmt.Errorf("prepare: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P05", Message: `prepared statement "stmtcache_3d5c91" already exists`})
	for _, tc := range []struct {
		name   string
		err    *PoolerError
		advice bool
	}{
		{"an operation's 42P05", &PoolerError{Mode: "cache_statement", Cause: cacheLost, op: "reserve"}, true},
		{"CheckPooler's 42P05", &PoolerError{Mode: "cache_statement", Cause: cacheLost}, true},
		{"sessions shared", &PoolerError{Mode: "cache_statement",
			Cause: errors.New("another connection's transaction ran on server session 48213, which this connection had just used")}, false},
		{"sessions moved", &PoolerError{Mode: "cache_statement", Cause: errors.New("one connection's statements ran on server sessions 48213 and 48217")}, false},
		{"made by hand without a cause", &PoolerError{Mode: "cache_statement"}, true},
		{"describe_exec", &PoolerError{Mode: "describe_exec", Cause: cacheLost}, false},
	} {
		msg := tc.err.Error()
		if !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, "which a transaction-pooling proxy does not keep") {
			t.Errorf("%s: %s\ndoes not start as a *PoolerError's message does", tc.name, msg)
		}
		if got := strings.Contains(msg, sessionAdvice); got != tc.advice {
			t.Errorf("%s: %s\nsays the session pooler's advice: %t, want %t", tc.name, msg, got, tc.advice)
		}
	}
}

// A *PoolerError was one line of 600 to 830 characters that said what it
// saw (in parentheses, a sentence of its own in CheckPooler's) before what
// to change, which came after 300. It now says the problem in a short
// first part, what to change right after it, and what it saw last, still
// on one line; nothing it said is lost.
func TestPoolerErrorSaysTheProblemThenWhatToChange(t *testing.T) {
	t.Parallel()
	probe := errors.New("another connection's transaction ran on server session 48213, which this connection had just used, " +
		"and which keeps a statement prepared by name under that name: the statement caches of the connections that share it meet each other's statements")
	cacheLost := fmt.Errorf("prepare: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P05", Message: `prepared statement "stmtcache_3d5c91" already exists`})
	refused := &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "transaction blocks not allowed in statement pooling mode"}
	const execAdvice = "add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode " +
		"to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later with max_prepared_statements > 0"
	for _, tc := range []struct {
		name   string
		err    *PoolerError
		prefix string
		advice string
		says   []string
	}{
		{"CheckPooler's probe", &PoolerError{Mode: "cache_statement", Cause: probe}, "ratelimit: ", execAdvice,
			[]string{"pgx's cache_statement exec mode", "one server session", "transaction-pooling proxy"}},
		{"an operation's 42P05", &PoolerError{Mode: "cache_statement", Cause: cacheLost, op: "reserve"}, "ratelimit: reserve: ", execAdvice,
			[]string{"pgx's cache_statement exec mode", "transaction-pooling proxy", "server_reset_query = DISCARD ALL"}},
		{"describe_exec", &PoolerError{Mode: "describe_exec", Cause: cacheLost}, "ratelimit: ", execAdvice,
			[]string{"pgx's describe_exec exec mode", "transaction-pooling proxy"}},
		{"statement pooling", &PoolerError{StatementPooling: true, Cause: refused, op: "recover: reclaim expired tasks"},
			"ratelimit: recover: reclaim expired tasks: ", "run the pooler with pool_mode = transaction (and default_query_exec_mode=exec in the connection string) or pool_mode = session",
			[]string{"statement-pooling proxy", "multi-statement transactions", "Limiter.WithTx", "Recover", "schema.Migrate"}},
		{"made by hand", &PoolerError{}, "ratelimit: ", execAdvice, []string{"transaction-pooling proxy"}},
	} {
		msg := tc.err.Error()
		problem, rest, ok := strings.Cut(strings.TrimPrefix(msg, tc.prefix), ": ")
		switch {
		case !strings.HasPrefix(msg, tc.prefix) || !ok:
			t.Errorf("%s: %s\ndoes not start with %q and the problem", tc.name, msg, tc.prefix)
		case len(problem) > 130:
			t.Errorf("%s: the problem takes %d characters, before what to change: %s", tc.name, len(problem), problem)
		case !strings.HasPrefix(rest, tc.advice):
			t.Errorf("%s: %s\ndoes not say what to change right after the problem", tc.name, msg)
		case strings.Contains(msg, "\n"):
			t.Errorf("%s: %q is more than one line", tc.name, msg)
		}
		if tc.err.Cause != nil && !strings.HasSuffix(msg, "(seen: "+tc.err.Cause.Error()+")") {
			t.Errorf("%s: %s\ndoes not end with what it saw", tc.name, msg)
		}
		for _, s := range tc.says {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: %s\nno longer says %q", tc.name, msg, s)
			}
		}
	}
}
