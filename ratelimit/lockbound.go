package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/locktimeout"
)

// lockBounded runs each statement sent through it with the maintenance
// settings (SetMaintenanceSettings: jit off, and lock_timeout when it has a
// bound) set for that statement's transaction only, never on the server
// session (a transaction-pooling proxy hands it to other clients).
// SetMaintenanceSettings and the statement go in one pgx.Batch: one round
// trip, one implicit transaction. lock_timeout must be in force before the
// server first parses the statement, which already waits then for the
// locks of the tables it reads (a migration's ALTER TABLE holds one ACCESS
// EXCLUSIVE): that holds only where pgx sends a statement in the round
// trip that runs it; where it prepares or describes it first
// (parsesFirst), it would do so before the batch's setting ran, and
// lockBoundedTx serves instead when there is a bound. jit is read when the
// statement is planned and run, after the setting in either case.
// Begin and SendBatch pass through: a caller that opens a transaction of
// its own sets them in it first itself (boundTx).
type lockBounded struct {
	Executor
	queries *db.Queries
	millis  int64 // lock_timeout, locktimeout.Millis of the bound; 0: none set
}

// stepConn is what the steps of Recover and Prune send their statements
// through: the pool, with jit off and behind lock_timeout with
// WithMaintenanceLockTimeout.
func (m *Maintenance) stepConn() Executor {
	return m.lockConn(m.opts.lockTimeout)
}

// lockConn is the pool with jit off, behind a lock_timeout of d (none when
// d is not positive), for each statement's transaction.
func (m *Maintenance) lockConn(d time.Duration) Executor {
	millis := locktimeout.Millis(d)
	if millis > 0 && m.parsesFirst {
		return lockBoundedTx{Executor: m.pool, queries: m.queries, millis: millis}
	}
	return lockBounded{Executor: m.pool, queries: m.queries, millis: millis}
}

// boundTx sets the maintenance settings in tx, a transaction of its own
// just begun, in a round trip of its own: pgx may prepare the statements
// of a batch sent next before the batch runs (lock_timeout must be in
// force then; jit off whether or not WithMaintenanceLockTimeout bounds it).
func (m *Maintenance) boundTx(ctx context.Context, tx pgx.Tx) error {
	return m.queries.SetMaintenanceSettings(ctx, tx, locktimeout.Millis(m.opts.lockTimeout))
}

// send sends SetMaintenanceSettings and the statement, and reads the
// setting's answer; the statement's is next in the results.
func (c lockBounded) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	queue(b, func(r db.DBTX) { _ = c.queries.SetMaintenanceSettings(ctx, r, c.millis) })
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
	return &boundedRows{Rows: rows, end: func(error) error { return br.Close() }}, nil
}

func (c lockBounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := c.Query(ctx, sql, args...)
	return boundedRow{rows: rows, err: err}
}

// boundedRows are a statement's rows; once they are read (or closed) its
// transaction ends too (end: the batch closed, the transaction committed or,
// after an error of the rows, rolled back), and an error of its end (the
// commit's) is theirs.
type boundedRows struct {
	pgx.Rows
	end    func(failed error) error
	closed bool
	err    error // end's, once closed
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
	if err := r.end(r.Rows.Err()); err != nil && r.Rows.Err() == nil {
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
