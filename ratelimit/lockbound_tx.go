package ratelimit

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// lockBoundedTx is lockBounded where pgx prepares or describes a statement
// new to its connection in a round trip of its own before it runs it
// (parsesFirst: its default, cache_statement, and cache_describe,
// describe_exec): each statement runs in a transaction of its own, begun
// and given its lock_timeout in round trips before the statement's, so
// that the setting is in force when the server first parses it. A
// statement-pooling proxy refuses the transaction.
type lockBoundedTx struct {
	Executor
	queries *db.Queries
	millis  int64 // lock_timeout, locktimeout.Millis of the bound
}

// begin begins the statement's own transaction and sets lock_timeout (and
// jit off) in it.
func (c lockBoundedTx) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := c.Executor.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.queries.SetMaintenanceSettings(ctx, tx, c.millis); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

func (c lockBoundedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := c.begin(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return pgconn.CommandTag{}, err
	}
	return tag, tx.Commit(ctx)
}

func (c lockBoundedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &boundedRows{Rows: rows, end: func(failed error) error {
		if failed != nil {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}}, nil
}

func (c lockBoundedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := c.Query(ctx, sql, args...)
	return boundedRow{rows: rows, err: err}
}
