package poolerr

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Only PgBouncer's refusal of a transaction block is statement pooling: its other 08P01 errors
// (a full pool's query_wait_timeout) and the server's are left as they are.
func TestWrap(t *testing.T) {
	refusal := &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "transaction blocks not allowed in statement pooling mode"}
	err := Wrap(fmt.Errorf("migrate up: %w", refusal), MigrationsNeed)
	var pgErr *pgconn.PgError
	if !errors.Is(err, ErrStatementPooling) || !errors.Is(err, ErrMismatch) || !errors.As(err, &pgErr) || pgErr != refusal {
		t.Errorf("Wrap(PgBouncer's refusal) = %v, want ErrStatementPooling wrapping the refusal", err)
	}
	// The problem first, then what to change, then what was seen, as a *ratelimit.PoolerError
	// says it; what err said before the refusal (the operation) still starts the message.
	want := "migrate up: the connections go through a pooler that pools by statement, which runs no transaction " +
		"of more than one statement, and " + MigrationsNeed + ": " + Advice +
		" (seen: FATAL: transaction blocks not allowed in statement pooling mode (SQLSTATE 08P01))"
	if got := err.Error(); got != want {
		t.Errorf("Wrap(PgBouncer's refusal) says\n%q, want\n%q", got, want)
	}
	// Wrapped again (schema.Locked's error, which pgadmit migrate wraps too), it says it once.
	if again := Wrap(fmt.Errorf("migrate: %w", err), MigrationsNeed); strings.Count(again.Error(), "pool_mode = transaction") != 1 {
		t.Errorf("Wrap of a wrapped refusal says %q, want the advice once", again)
	}
	for _, other := range []error{
		nil,
		errors.New("connection refused"),
		&pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "query_wait_timeout"},
		&pgconn.PgError{Severity: "ERROR", Code: "25001", Message: "statement pooling mode"},
	} {
		if got := Wrap(other, MigrationsNeed); got != other {
			t.Errorf("Wrap(%v) = %v, want it unchanged", other, got)
		}
	}
}

// Only pgx's own cached statements, missing (26000) or clashing (42P05), wrapped or not, are a
// lost statement cache: a prepared statement of the caller's own is not.
func TestStatementCacheLost(t *testing.T) {
	for _, err := range []error{
		&pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_9071ab2d" does not exist`},
		fmt.Errorf("inspect: %w", &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_9071ab2d" already exists`}),
	} {
		if !StatementCacheLost(err) {
			t.Errorf("StatementCacheLost(%v) = false, want true", err)
		}
	}
	for _, err := range []error{
		nil,
		errors.New(`prepared statement "stmtcache_9071ab2d" does not exist`),
		&pgconn.PgError{Code: "26000", Message: `prepared statement "mine" does not exist`},
		&pgconn.PgError{Code: "08P01", Message: `"stmtcache_9071ab2d"`},
	} {
		if StatementCacheLost(err) {
			t.Errorf("StatementCacheLost(%v) = true, want false", err)
		}
	}
}
