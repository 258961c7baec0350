package ratelimit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// lockBounded runs each statement sent through it behind SetLockTimeout, the
// two in one pgx.Batch: one round trip, one implicit transaction, so that
// lock_timeout holds for that statement only and never stays on a server
// session (a transaction-pooling proxy hands it to other clients). A
// statement that waited too long fails with 55P03 and rolls back whole.
// It bounds the row locks the steps wait for, not a table's lock met while
// the server parses a statement: in its default, caching exec modes pgx
// prepares a statement new to its connection before the batch runs,
// setting included (Doctor, which waits for tables, sets lock_timeout first
// in a transaction of its own).
// Begin and SendBatch pass through: a caller that opens a transaction of
// its own queues SetLockTimeout first itself (boundLocks).
type lockBounded struct {
	Executor
	queries *db.Queries
	seconds float64
}

// stepConn is what the steps of Recover and Prune send their statements
// through: the pool, behind lock_timeout with WithMaintenanceLockTimeout.
func (m *Maintenance) stepConn() Executor {
	if m.opts.lockTimeout <= 0 {
		return m.pool
	}
	return lockBounded{Executor: m.pool, queries: m.queries, seconds: m.opts.lockTimeout.Seconds()}
}

// boundLocks queues SetLockTimeout at the head of b, a batch sent in a
// transaction of its own (a no-op without WithMaintenanceLockTimeout).
func (m *Maintenance) boundLocks(ctx context.Context, b *pgx.Batch) {
	if m.opts.lockTimeout > 0 {
		queue(b, func(r db.DBTX) { _ = m.queries.SetLockTimeout(ctx, r, m.opts.lockTimeout.Seconds()) })
	}
}

// send sends SetLockTimeout and the statement, and reads the setting's
// answer; the statement's is next in the results.
func (c lockBounded) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	queue(b, func(r db.DBTX) { _ = c.queries.SetLockTimeout(ctx, r, c.seconds) })
	b.Queue(sql, args...)
	br := c.Executor.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (c lockBounded) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := c.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close() // it says err again
		return pgconn.CommandTag{}, err
	}
	// The implicit transaction commits at the batch's end: its error too is the statement's.
	return tag, br.Close()
}

func (c lockBounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := c.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		_ = br.Close()
		return nil, err
	}
	return &boundedRows{Rows: rows, br: br}, nil
}

func (c lockBounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := c.Query(ctx, sql, args...)
	return boundedRow{rows: rows, err: err}
}

// boundedRows are a statement's rows; once they are read (or closed) the
// batch is closed too, and its error (the implicit transaction's commit)
// is theirs.
type boundedRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error // the batch's, once closed
}

func (r *boundedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close() // sqlc's code reads Err before its deferred Close
	return false
}

func (r *boundedRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if err := r.br.Close(); err != nil && r.Rows.Err() == nil {
		r.err = err
	}
}

func (r *boundedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// boundedRow is QueryRow's row: as pgx's, ErrNoRows when there is none.
type boundedRow struct {
	rows pgx.Rows
	err  error
}

func (r boundedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// lockNotAvailable reports the server giving up waiting for a lock (lock_timeout).
func lockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
