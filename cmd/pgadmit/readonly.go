package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// readOnlyWhy says why a session may not write, and what to do.
const readOnlyWhy = "this session may not write: the database URL names a read-only server " +
	"(a hot standby: run it against the primary) or default_transaction_read_only is on for the role or the database"

// readOnlyAdvice adds to err, when it is the server refusing a write because the session may
// only read (SQLSTATE 25006, read_only_sql_transaction), why that is and what to do: the
// connection string names a hot standby, or default_transaction_read_only is on for the role or
// the database. migrate, recover and prune write (demo and bench too, which check first:
// checkWritable); the server's "cannot execute INSERT in a read-only transaction" says neither.
func readOnlyAdvice(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		return err
	}
	return fmt.Errorf("%w: %s", err, readOnlyWhy)
}

// checkWritable fails, with readOnlyWhy, when pool's sessions may not write (transaction_read_only
// on: a hot standby, or default_transaction_read_only on for the role, the database or the
// connection string). demo and bench check it before they migrate or run anything: there every
// request failed with SQLSTATE 25006 for the run's whole duration, and a full report of it came
// before the advice.
func checkWritable(ctx context.Context, pool *pgxpool.Pool) error {
	ro, err := db.New().BenchServerSetting(ctx, pool, "transaction_read_only")
	if err != nil {
		return fmt.Errorf("read setting transaction_read_only: %w", err)
	}
	if ro == "on" {
		return fmt.Errorf("transaction_read_only is on, so nothing was written: %s", readOnlyWhy)
	}
	return nil
}
