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
	if !strings.HasPrefix(err.Error(), "migrate up: FATAL: transaction blocks") || !strings.Contains(err.Error(), "pool_mode = transaction") {
		t.Errorf("Wrap(PgBouncer's refusal) says %q", err)
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
