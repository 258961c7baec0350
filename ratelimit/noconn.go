package ratelimit

import (
	"context"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Receivers that their constructor did not make, and nil connections: each
// operation returns a *ValidationError (errors.Is ErrInvalidInput) naming
// what is missing, writes nothing, and never panics. The receiver is
// checked first, then a nil context, by callable at the top of every
// exported method that returns an error (two nil checks on the hot path);
// a nil connection, by the statements themselves (noConn), after the
// arguments were validated.
// A zero Limiter lacks more than its connection (its queries, hot
// counters, options), so it is refused whole rather than given a noConn.

// usable returns nil for a Limiter made by New (or WithTx on one), or the
// *ValidationError of a zero or nil one. Close, Stats and WithTx, which
// return no error, do nothing on those instead.
func (l *Limiter) usable() error {
	if l == nil || l.queries == nil { // New sets queries, and WithTx copies it
		return notMade("Limiter", "New", l == nil)
	}
	return nil
}

// usable is Limiter.usable for a Maintenance.
func (m *Maintenance) usable() error {
	if m == nil || m.queries == nil {
		return notMade("Maintenance", "NewMaintenance", m == nil)
	}
	return nil
}

// callable is usable for an operation run with ctx: a nil ctx is refused
// too. pgx and the combiner would dereference it, panicking, and leave a
// combined statement (which Close then waits for) or the connection of a
// caller's transaction (busy to every later statement) stuck.
func (l *Limiter) callable(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	return validContext(ctx)
}

// callable is Limiter.callable for a Maintenance.
func (m *Maintenance) callable(ctx context.Context) error {
	if err := m.usable(); err != nil {
		return err
	}
	return validContext(ctx)
}

// validContext refuses a nil ctx as bad input.
func validContext(ctx context.Context) error {
	if ctx == nil {
		return &ValidationError{Field: "ctx", Value: nil, Reason: "must be a context, not nil (context.Background() when there is none)"}
	}
	return nil
}

// notMade is the error of a receiver of type typ not made with constructor.
func notMade(typ, constructor string, isNil bool) error {
	value := any(typ + "{}")
	if isNil {
		value = nil
	}
	return &ValidationError{Field: typ, Value: value, Reason: "not made with " + constructor}
}

// orNoConn returns conn, or, when conn is nil (see isNilConn: a pool
// whose creation failed, unchecked, perhaps in a wrapper of one's own), an
// Executor on which every statement fails with a *ValidationError naming
// field, so that each operation returns an error rather than panic deep
// inside pgx. What New and WithTx keep is thus never nil, and execMode,
// oneConnection and unheldAtOnce may call the methods they find on it.
func orNoConn(conn Executor, field string) Executor {
	if conn != nil && !isNilConn(reflect.ValueOf(conn), 0) {
		return conn
	}
	return noConn{&ValidationError{Field: field, Value: nil, Reason: "must be a pool, connection or transaction, not nil"}}
}

// isNilConn reports whether v, an Executor, is nil: a nil pointer (a nil
// *pgxpool.Pool, *pgx.Conn or pgx.Tx in an Executor), or an Executor of
// one's own (a struct, or a pointer to one) that embeds a nil one, from
// which it takes its methods (Exec, Config, Conn...): pgx would panic in
// them. Embedded Executors are followed nilConnDepth deep at most, so that
// a cycle of pointers ends.
func isNilConn(v reflect.Value, depth int) bool {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return true
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || depth >= nilConnDepth {
		return false
	}
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.Anonymous && f.Type.Implements(executorType) && isNilConn(v.Field(i), depth+1) {
			return true
		}
	}
	return false
}

var executorType = reflect.TypeFor[Executor]()

// nilConnDepth bounds how deep isNilConn follows embedded Executors.
const nilConnDepth = 8

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
