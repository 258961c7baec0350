package main

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// readOnlyAdvice adds to err, when it is the server refusing a write because the session may
// only read (SQLSTATE 25006, read_only_sql_transaction), why that is and what to do: the
// connection string names a hot standby, or default_transaction_read_only is on for the role or
// the database. migrate, recover and prune write (demo and bench too); the server's "cannot execute
// INSERT in a read-only transaction" says neither.
func readOnlyAdvice(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		return err
	}
	return fmt.Errorf("%w: this session may not write: the database URL names a read-only server "+
		"(a hot standby: run it against the primary) or default_transaction_read_only is on for the role or the database", err)
}
