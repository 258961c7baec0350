package ratelimit

import (
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// execMode is the default exec mode of conn's connections: a pool's, a
// connection's, or that of the connection under a pgx.Tx or a
// *pgxpool.Conn, found in conn or in an Executor it embeds (shownConn). Of
// an Executor of another kind (a wrapper of the caller's own that shows
// none) it is pgx's default, QueryExecModeCacheStatement. conn is not nil,
// nor a released *pgxpool.Conn, nor a wrapper of either (orNoConn): their
// methods would panic.
func execMode(conn Executor) pgx.QueryExecMode {
	v, ok := shownConn(conn)
	if !ok || !v.CanInterface() { // reached through an unexported field: reflect cannot call it
		return pgx.QueryExecModeCacheStatement
	}
	switch c := v.Interface().(type) {
	case interface{ Config() *pgxpool.Config }:
		return c.Config().ConnConfig.DefaultQueryExecMode
	case interface{ Config() *pgx.ConnConfig }:
		return c.Config().DefaultQueryExecMode
	case interface{ Conn() *pgx.Conn }: // a pgx.Tx, a *pgxpool.Conn
		if pc := c.Conn(); pc != nil {
			return pc.Config().DefaultQueryExecMode
		}
	}
	return pgx.QueryExecModeCacheStatement
}

// shownConn returns what conn runs on, as far as it shows: conn itself
// when it has one of the methods that tell (a pool's Config()
// *pgxpool.Config, a connection's Config() *pgx.ConnConfig, the Conn()
// *pgx.Conn of a pool's connection or a pgx.Tx), else the first Executor
// it embeds that has one (findConn). A wrapper of one's own need not have
// them itself: in struct{ *pgxpool.Conn } the embedded field, named Conn,
// hides the connection's Conn method, and struct{ Executor } shows only
// Executor's methods. v is the value itself, not an interface holding it
// (an embedded Executor field). ok is false when nothing shows one.
func shownConn(conn Executor) (v reflect.Value, ok bool) {
	v, ok = findConn(reflect.ValueOf(conn), 0, showsConn)
	for ok && v.Kind() == reflect.Interface {
		v = v.Elem() // not nil: showsConn held
	}
	return v, ok
}

// shownPool returns the pool conn runs on, a *pgxpool.Pool or one that an
// Executor of one's own embeds (shownConn), where reflect can call it.
func shownPool(conn Executor) (interface{ Config() *pgxpool.Config }, bool) {
	if v, ok := shownConn(conn); ok && v.CanInterface() {
		pool, ok := v.Interface().(interface{ Config() *pgxpool.Config })
		return pool, ok
	}
	return nil, false
}

// showsConn reports whether v, or the value in v when v is an interface,
// has a method that tells what it runs on (shownConn).
func showsConn(v reflect.Value) bool {
	for v.Kind() == reflect.Interface {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return false
	}
	t := v.Type()
	return t.Implements(poolConfigType) || t.Implements(connConfigType) || t.Implements(connOfType)
}

// The methods showsConn looks for.
var (
	poolConfigType = reflect.TypeFor[interface{ Config() *pgxpool.Config }]()
	connConfigType = reflect.TypeFor[interface{ Config() *pgx.ConnConfig }]()
	connOfType     = reflect.TypeFor[interface{ Conn() *pgx.Conn }]()
)

// parsesFirst reports whether pgx, in mode, sends a statement new to its
// connection to the server in a round trip of its own before it runs it
// (to prepare or describe it), and a batch's statements before the batch:
// the server then parses it, and waits for the locks of the tables it
// reads, before anything sent with it in force. Only QueryExecModeExec and
// the simple protocol send a statement, or a batch, in the one round trip
// that runs it.
func parsesFirst(mode pgx.QueryExecMode) bool {
	return mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
}
