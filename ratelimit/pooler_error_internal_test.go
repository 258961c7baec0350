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
		if !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, "the connections go through a transaction-pooling proxy") {
			t.Errorf("%s: %s\ndoes not start as a *PoolerError's message does", tc.name, msg)
		}
		if got := strings.HasSuffix(msg, sessionAdvice); got != tc.advice {
			t.Errorf("%s: %s\nends with the session pooler's advice: %t, want %t", tc.name, msg, got, tc.advice)
		}
	}
}
