package ratelimit

import (
	"context"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// orNoConn returns conn, or, when conn is nil (a nil interface, or a nil
// *pgxpool.Pool, *pgx.Conn or pgx.Tx in one: a pool whose creation failed,
// unchecked), an Executor on which every statement fails with a
// *ValidationError naming field, so that each operation returns an error
// rather than panic deep inside pgx.
func orNoConn(conn Executor, field string) Executor {
	if conn != nil {
		if v := reflect.ValueOf(conn); v.Kind() != reflect.Pointer || !v.IsNil() {
			return conn
		}
	}
	return noConn{&ValidationError{Field: field, Value: nil, Reason: "must be a pool, connection or transaction, not nil"}}
}

// noConn is the Executor of a nil conn: everything fails with err.
type noConn struct{ err error }

func (c noConn) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, c.err
}
func (c noConn) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, c.err }
func (c noConn) QueryRow(context.Context, string, ...any) pgx.Row        { return c }
func (c noConn) Scan(...any) error                                       { return c.err } // as its own pgx.Row
func (c noConn) Begin(context.Context) (pgx.Tx, error)                   { return nil, c.err }
func (c noConn) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	return pgx.FailedBatchResults(b, c.err)
}
