package ratelimit

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// execMode is the default exec mode of conn's connections: a pool's, a
// connection's, or that of the connection under a pgx.Tx or a
// *pgxpool.Conn. Of an Executor of another kind (a wrapper of the
// caller's own) it is pgx's default, QueryExecModeCacheStatement. conn is
// not nil, nor a released *pgxpool.Conn, nor a wrapper of either (orNoConn):
// their methods would panic.
func execMode(conn Executor) pgx.QueryExecMode {
	switch c := conn.(type) {
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
