package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// probeSaw is what one run of CheckPooler's probe saw, when it saw no mismatch.
type probeSaw int

const (
	// probeOneSession: the prober kept its session, and the holder did not get it.
	probeOneSession probeSaw = iota
	// probeDirect: as probeOneSession, on a session whose backend process id is the one the
	// prober's connection was given at login.
	probeDirect
	// probeCarriedOver: the prober's prepared statement ran on two sessions.
	probeCarriedOver
	// probeWaited: through a proxy, the prober's second statement got no server session within
	// proberWait while the holder's transaction was open, so it was not seen where it runs.
	probeWaited
)

// execModeName names mode as pgx's connection strings do.
func execModeName(mode pgx.QueryExecMode) string {
	return strings.ReplaceAll(mode.String(), " ", "_")
}

// probePooler runs CheckPooler's probe once on a connection of pool and holder. namesKept is
// checkTransaction's: whether a statement prepared by name is on the session under that name.
func probePooler(ctx context.Context, pool *pgxpool.Pool, holder *pgx.Conn, mode pgx.QueryExecMode, namesKept bool) (_ probeSaw, err error) {
	mismatch := func(cause error) error { return &PoolerError{Mode: execModeName(mode), Cause: cause} }
	// Behind a transaction pooler the prober's own first round trips may already land on
	// different server sessions (another client took the one it prepared on): that is the
	// mismatch too, not a failure of the check.
	failed := func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch {
			case mode == pgx.QueryExecModeCacheStatement && (pgErr.Code == "26000" || pgErr.Code == "42P05"),
				mode == pgx.QueryExecModeDescribeExec && (pgErr.Code == "26000" || pgErr.Code == "08P01"):
				return mismatch(err)
			}
		}
		return wrapDBError(ctx, "pooler check", err)
	}

	// The prober's first round trips wait for a connection of the pool and for a server
	// session. Behind a pooler in session mode with none to spare (the holder keeps the one it
	// got) the session would come never, or at the pooler's query_wait_timeout: give up after
	// sessionWait, and say so.
	fctx, fcancel := context.WithTimeout(ctx, sessionWait)
	defer fcancel()
	first := func(err error) error {
		if fctx.Err() != nil && ctx.Err() == nil {
			return errNoSpareSession
		}
		return failed(err)
	}
	prober, err := pool.Acquire(fctx)
	if err != nil {
		if fctx.Err() != nil && ctx.Err() == nil && pool.Stat().AcquiredConns() >= pool.Config().MaxConns {
			return 0, errNoPoolConn
		}
		return 0, first(err)
	}
	defer giveProberBack(pool, prober)

	// What the prober runs. For cache_statement behind a proxy that keeps prepared statements
	// under names of its own, a statement it prepared by name: whether it runs on another
	// session tells whether the proxy carries it over. Else the statement itself: for
	// describe_exec in that mode, whose two round trips are what is probed; for cache_statement
	// in exec mode, so that the prober leaves no statement on a session, where the sessions alone
	// tell (see preparedNameKept).
	stmt, args := db.PoolerBackendPid, []any(nil)
	named := mode == pgx.QueryExecModeCacheStatement && !namesKept
	switch {
	case named:
		if stmt, err = probeStatementName(); err != nil {
			return 0, err
		}
		if _, err := prober.Conn().Prepare(fctx, stmt, db.PoolerBackendPid); err != nil {
			return 0, first(err)
		}
		// The prober goes back to the pool: kept, but for a failed deallocation. What the
		// server sessions hold of the statement is the proxy's, under its own names.
		deallocate := func(ctx context.Context) error { return prober.Conn().Deallocate(ctx, stmt) }
		defer undoOrClose(ctx, prober.Conn(), true, deallocate)
	case mode == pgx.QueryExecModeCacheStatement:
		args = []any{pgx.QueryExecModeExec}
	}
	var before int32
	if err := prober.QueryRow(fctx, stmt, args...).Scan(&before); err != nil {
		return 0, first(err)
	}
	fcancel()
	// The holder waits for a server session again, as the prober did.
	tx, err := beginWithin(ctx, holder)
	if errors.Is(err, errNoSpareSession) {
		return 0, err
	}
	if err != nil {
		return 0, wrapDBError(ctx, "pooler check", err)
	}
	// The holder is used again when the probe saw nothing and the check goes on.
	defer func() { undoOrClose(ctx, holder, err == nil, tx.Rollback) }()
	held, err := sessionOf(ctx, tx)
	switch {
	case errors.Is(err, errNoAnswer):
		return 0, err
	case err != nil:
		return 0, wrapDBError(ctx, "pooler check", err)
	case held == before && mode == pgx.QueryExecModeDescribeExec:
		// Another client connection got the prober's session between its transactions.
		return 0, mismatch(fmt.Errorf("another connection's transaction ran on server session %d, which this connection had just used", held))
	case held == before && !named:
		return 0, mismatch(fmt.Errorf("another connection's transaction ran on server session %d, which this connection had just "+
			"used, and which keeps a statement prepared by name under that name: the statement caches of the connections "+
			"that share it meet each other's statements", held))
	}
	pctx, cancel := context.WithTimeout(ctx, proberWait)
	defer cancel()
	var after int32
	err = prober.QueryRow(pctx, stmt, args...).Scan(&after)
	// A connection whose backend process id given at login is its session's is direct: a proxy
	// gives its own.
	direct := prober.Conn().PgConn().PID() == uint32(before)
	switch {
	case err == nil && after != before && named:
		return probeCarriedOver, nil
	case err == nil && after != before:
		return 0, mismatch(fmt.Errorf("one connection's statements ran on server sessions %d and %d", before, after))
	case err == nil && direct:
		return probeDirect, nil
	case err == nil:
		return probeOneSession, nil
	case pctx.Err() != nil && ctx.Err() == nil && direct:
		// No pooler to wait for a session from: the server stopped answering, which tells
		// nothing of a pooler. The cause is not wrapped: ctx did not end.
		return 0, fmt.Errorf("ratelimit: pooler check: the server gave no answer within %s to a statement on a "+
			"direct connection (no pooler that could make it wait for a server session): %v", proberWait, err)
	case pctx.Err() != nil && ctx.Err() == nil:
		// Through a proxy, which may have had no other session to give the prober while the
		// holder's transaction is open (one server connection, and PgBouncer 1.21+ keeping the
		// prepared statement under a name of its own): a probe that saw nothing. It is told
		// apart from one that saw one session, which it did not.
		return probeWaited, nil
	default:
		return 0, failed(err)
	}
}

// proberWait bounds the prober's second statement, which a proxy may have no server session
// for while the holder's transaction is open.
const proberWait = 2 * time.Second

// giveProberBack gives the connection of pool that CheckPooler's probe took (prober) back to pool
// once the probe is done with it (its deferred clean-ups ran), or, when it is closed (given up
// on mid-statement: at ctx's end, or at the probe's own bound; or closed by undoOrClose), takes
// it out of pool at once (Hijack), rather than leave pool to drop it. pgx closes a connection
// given up on mid-statement in the background: it sends a cancel request on a connection of its
// own, waits up to 15 s for the server (or the pooler) to answer it, and says goodbye. The pool
// counted the connection as acquired until that was done, so a pool of two had one for up to
// 15 s after CheckPooler returned (a pooler that forwards a cancel request only once a server
// connection comes free answers late). The clean-up still runs, bounded by pgx, on connections
// that pool no longer counts; pool's BeforeClose, if any, is called for the connection, as pool
// would.
func giveProberBack(pool *pgxpool.Pool, prober *pgxpool.Conn) {
	if !prober.Conn().IsClosed() {
		prober.Release()
		return
	}
	conn := prober.Hijack()
	if beforeClose := pool.Config().BeforeClose; beforeClose != nil {
		beforeClose(conn)
	}
}
