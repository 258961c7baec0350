package ratelimit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What New tells of conn (a single connection or not, its exec mode, how
// many give-backs its pool runs at once) is found in an Executor of one's
// own that embeds the pool or connection, however it embeds it: in
// struct{ *pgxpool.Conn } the field, named Conn, hides the Conn method,
// and struct{ Executor } shows only Executor's methods, so both were taken
// for a pool of pgx's default exec mode and size. Only the types are
// looked at for a single connection: nil ones serve (no database here).
func TestShownConnFindsWhatAWrapperEmbeds(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?pool_max_conns=6" +
		"&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects on first use only
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	type poolConn struct{ *pgxpool.Conn }
	type nested struct{ poolConn }
	ones := map[string]Executor{
		"*pgxpool.Conn":                   (*pgxpool.Conn)(nil),
		"*pgx.Conn":                       (*pgx.Conn)(nil),
		"own, embedding a *pgxpool.Conn":  struct{ *pgxpool.Conn }{},
		"&own, embedding a *pgxpool.Conn": &struct{ *pgxpool.Conn }{},
		"own, nested, unexported":         nested{},
		"own, embedding an Executor":      struct{ Executor }{(*pgxpool.Conn)(nil)},
		"own, embedding a *pgx.Conn":      struct{ *pgx.Conn }{},
		"own, embedding a pgx.Tx":         struct{ Executor }{struct{ pgx.Tx }{}},
	}
	for name, conn := range ones {
		if !oneConnection(conn) {
			t.Errorf("%s: oneConnection false, want true", name)
		}
	}
	pools := map[string]Executor{
		"*pgxpool.Pool":                     pool,
		"own, embedding a *pgxpool.Pool":    struct{ *pgxpool.Pool }{pool},
		"own, embedding an Executor":        struct{ Executor }{pool},
		"&own, nested, embedding Executors": &struct{ Executor }{struct{ Executor }{pool}},
	}
	for name, conn := range pools {
		if oneConnection(conn) {
			t.Errorf("%s: oneConnection true, want false", name)
		}
		if mode := execMode(conn); mode != pgx.QueryExecModeSimpleProtocol {
			t.Errorf("%s: execMode %v, want the pool's, %v", name, mode, pgx.QueryExecModeSimpleProtocol)
		}
		if n := unheldAtOnce(conn); n != 3 {
			t.Errorf("%s: unheldAtOnce %d, want 3 (half the pool's 6)", name, n)
		}
	}
	// An Executor of one's own that shows nothing is taken for a pool of
	// pgx's defaults.
	var none Executor = ownExecutor{}
	if oneConnection(none) || execMode(none) != pgx.QueryExecModeCacheStatement || unheldAtOnce(none) != defaultUnheldAtOnce() {
		t.Errorf("an Executor showing nothing: oneConnection %v, execMode %v, unheldAtOnce %d; want false, %v, %d",
			oneConnection(none), execMode(none), unheldAtOnce(none), pgx.QueryExecModeCacheStatement, defaultUnheldAtOnce())
	}
}

// ownExecutor is an Executor of one's own that embeds none of pgx's.
type ownExecutor struct{ noConn }
