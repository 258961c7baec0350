package ratelimit

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Receivers that their constructor did not make, and nil connections (or
// pool connections already released): each operation returns a
// *ValidationError (errors.Is ErrInvalidInput) naming what is missing,
// writes nothing, and never panics. The receiver is checked first, then a
// nil context, by callable at the top of every exported method that
// returns an error (two nil checks on the hot path);
// a nil or released connection, by the statements themselves (noConn),
// after the arguments were validated.
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

// orNoConn returns conn, or, when conn is nil (see isNil: a pool whose
// creation failed, unchecked, perhaps in a wrapper of one's own) or a
// *pgxpool.Conn already released (see released), an Executor on which
// every statement fails with a *ValidationError naming field, so that each
// operation returns an error rather than panic deep inside pgx. What New
// and WithTx keep is thus never nil, and execMode, oneConnection and
// unheldAtOnce may call the methods they find on it.
func orNoConn(conn Executor, field string) Executor {
	v := reflect.ValueOf(conn)
	if conn == nil || isNil(v) {
		return noConn{nilConn(field, nil)}
	}
	if found, ok := findConn(v, 0, isNil); ok {
		// An Executor of one's own, not nil itself, embedding a nil: the
		// Value names both, where "(<nil>)" read as a nil passed.
		return noConn{nilConn(field, fmt.Sprintf("%T embedding a nil %s", conn, found.Type()))}
	}
	if anyConn(v, 0, released) {
		return noConn{&ValidationError{Field: field, Value: fmt.Sprintf("%T", conn),
			Reason: "must be a connection still acquired from its pool, not one released (or hijacked) from it"}}
	}
	return conn
}

// nilConn is the error of a nil conn, or of one that embeds a nil (value,
// nil for a nil conn, says what was given then).
func nilConn(field string, value any) error {
	return &ValidationError{Field: field, Value: value, Reason: "must be a pool, connection or transaction, not nil"}
}

// anyConn reports whether is holds for v, an Executor, or for an Executor
// it embeds: an Executor of one's own (a struct, or a pointer to one)
// takes its methods (Exec, Config, Conn...) from those it embeds, and pgx
// would panic in them (findConn walks them).
func anyConn(v reflect.Value, depth int, is func(reflect.Value) bool) bool {
	_, ok := findConn(v, depth, is)
	return ok
}

// findConn returns the first of v, an Executor, and the Executors it
// embeds (depth first, in the order of the fields) for which is holds.
// Embedded Executors are followed nilConnDepth deep at most, so that a
// cycle of pointers ends.
func findConn(v reflect.Value, depth int, is func(reflect.Value) bool) (reflect.Value, bool) {
	if is(v) {
		return v, true
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return reflect.Value{}, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || depth >= nilConnDepth {
		return reflect.Value{}, false
	}
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.Anonymous && f.Type.Implements(executorType) {
			if found, ok := findConn(v.Field(i), depth+1, is); ok {
				return found, true
			}
		}
	}
	return reflect.Value{}, false
}

// isNil reports whether v is a nil pointer or interface (a nil
// *pgxpool.Pool, *pgx.Conn or pgx.Tx in an Executor), or points to one.
func isNil(v reflect.Value) bool {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return true
		}
		v = v.Elem()
	}
	return false
}

// released reports whether v, not nil (isNil), has a Conn() that panics:
// a *pgxpool.Conn released to its pool or hijacked from it, whose methods
// all dereference the resource Release cleared, or a wrapper that reaches
// one. pgxpool has no other way to tell (the resource is unexported), so
// Conn(), which execMode calls too and is otherwise harmless, runs here
// under recover: the one recover of the input checks. One that reflect
// reached through an unexported field cannot be called (reflect refuses);
// its Conn, when promoted, is called on the wrapper.
func released(v reflect.Value) (panicked bool) {
	if !v.CanInterface() {
		return false
	}
	c, ok := v.Interface().(interface{ Conn() *pgx.Conn })
	if !ok {
		return false
	}
	defer func() { panicked = recover() != nil }()
	c.Conn()
	return false
}

var executorType = reflect.TypeFor[Executor]()

// nilConnDepth bounds how deep findConn follows embedded Executors.
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
