package ratelimit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// errRecorded is what a recorder answers to a query that expects rows: the
// generated method returns it and its (empty) result is ignored.
var errRecorded = errors.New("ratelimit: statement recorded, not run")

// recorder is a db.DBTX that runs nothing. It records the statement and the
// arguments a generated query method would send, so that several generated
// queries can be pipelined in one pgx.Batch (one round trip, one implicit
// transaction) while keeping sqlc's typed parameters and argument order.
type recorder struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return recordedRow{}
}

type recordedRow struct{}

func (recordedRow) Scan(...any) error { return errRecorded }

// queue appends to b the statement that call sends through its db.DBTX.
// call must invoke exactly one generated query method with the DBTX it is given.
func queue(b *pgx.Batch, call func(db.DBTX)) *pgx.QueuedQuery {
	var r recorder
	call(&r)
	return b.Queue(r.sql, r.args...)
}

// queueRows queues a generated :many query and collects its rows, by
// position, into the generated row type when the batch runs. *out is nil
// unless the rows were read whole (pgx.CollectRows gives nil on an error,
// a non-nil slice, empty or not, otherwise).
func queueRows[T any](b *pgx.Batch, out *[]T, call func(db.DBTX)) {
	queue(b, call).Query(func(rows pgx.Rows) error {
		collected, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
		*out = collected
		return err
	})
}

// queueRow queues a generated :one query and scans its single row, by
// position, into the generated row type when the batch runs.
func queueRow[T any](b *pgx.Batch, out *T, call func(db.DBTX)) {
	queue(b, call).Query(func(rows pgx.Rows) error {
		row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[T])
		*out = row
		return err
	})
}

// runBatch sends b in one round trip. Outside a transaction the whole batch
// is one implicit transaction: a failing statement rolls back all of it.
func runBatch(ctx context.Context, conn Executor, b *pgx.Batch) error {
	return conn.SendBatch(ctx, b).Close()
}
