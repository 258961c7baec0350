package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// ErrPoolerMismatch is matched (errors.Is) by every *PoolerError.
var ErrPoolerMismatch = errors.New("ratelimit: the pool's pgx exec mode needs session state that the connection pooler does not keep")

// PoolerError reports a pool whose connections go through a transaction-pooling proxy (PgBouncer
// with pool_mode = transaction) while its pgx exec mode needs one server session across
// protocol messages that the proxy may send to different sessions:
//
//   - cache_statement, pgx's default, prepares a named statement in one transaction and runs it
//     in later ones: they fail intermittently with SQLSTATE 26000 (prepared statement
//     "stmtcache_..." does not exist) or 42P05 (... already exists), unless the proxy carries
//     prepared statements over (PgBouncer 1.21+ with max_prepared_statements);
//   - describe_exec describes a statement and executes it in two round trips: the second may
//     bind another client's statement (SQLSTATE 08P01, bind message supplies N parameters, but
//     prepared statement "" requires M), or one with the same parameters.
//
// A Commit that fails so leaves its leases live until their TTL. The exec, cache_describe and
// simple_protocol modes keep no such state.
//
// CheckPooler returns it when its probe sees the mismatch; every Limiter and Maintenance
// operation returns it too (wrapped: use errors.As or errors.Is with ErrPoolerMismatch) when
// it fails with the errors of cache_statement, so that the first failure says what to change.
type PoolerError struct {
	// Mode is the pool's exec mode, as pgx names it in connection strings.
	Mode string
	// Cause is what the probe saw.
	Cause error
}

// Error says what to change.
func (e *PoolerError) Error() string {
	return fmt.Sprintf("ratelimit: the connections go through a transaction-pooling proxy, which runs one "+
		"connection's transactions on different server sessions, and pgx's %s exec mode needs one session (%v): "+
		"add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode "+
		"to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later "+
		"with max_prepared_statements > 0", e.Mode, e.Cause)
}

// Is makes errors.Is(err, ErrPoolerMismatch) true.
func (e *PoolerError) Is(target error) bool { return target == ErrPoolerMismatch }

// Unwrap returns what the probe saw.
func (e *PoolerError) Unwrap() error { return e.Cause }

// lostStatementCache tells whether pgErr is pgx's statement cache meeting a session that is not
// the one it prepared on: its statement missing (26000) or another client's there under the same
// name (42P05). pgx names the statements it caches "stmtcache_" and a hash of the SQL.
func lostStatementCache(pgErr *pgconn.PgError) bool {
	return (pgErr.Code == "26000" || pgErr.Code == "42P05") && strings.Contains(pgErr.Message, `"stmtcache_`)
}

// CheckPooler tells whether pgadmit's statements can run on pool as it is configured: it returns
// a *PoolerError when the pool's pgx exec mode is cache_statement (pgx's default) or
// describe_exec and its connections go through a proxy that may run one connection's
// transactions on different server sessions. The exec, cache_describe and simple_protocol
// modes need no session state and pass without a probe.
//
// The probe takes a connection of the pool and opens one of its own for a moment. The first
// runs a statement (for cache_statement, one it prepared by name); the second holds a
// transaction open, which behind a transaction pooler takes the session the first one just gave
// back (PgBouncer hands out the most recently released server connection first); then the first
// runs its statement again. Behind a busy proxy another client may take that session instead,
// and the first may land back on its own by chance, so the probe runs up to three times
// and reports a mismatch as soon as one run sees it. Direct connections and poolers in session
// mode pass, and so does PgBouncer 1.21+ with max_prepared_statements for cache_statement. Run
// it at start-up or from a health check, not on a hot path. A probe that cannot conclude (the
// proxy has a single server connection to share) reports no mismatch.
func CheckPooler(ctx context.Context, pool *pgxpool.Pool) error {
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	if mode != pgx.QueryExecModeCacheStatement && mode != pgx.QueryExecModeDescribeExec {
		return nil
	}
	for range poolerProbes {
		if concluded, err := probePooler(ctx, pool, mode); err != nil || !concluded {
			return err
		}
	}
	return nil
}

// poolerProbes bounds the runs of CheckPooler's probe that see one session before it reports
// no mismatch.
const poolerProbes = 3

// probePooler runs CheckPooler's probe once. concluded is false when it could not conclude.
func probePooler(ctx context.Context, pool *pgxpool.Pool, mode pgx.QueryExecMode) (concluded bool, err error) {
	prober, err := pool.Acquire(ctx)
	if err != nil {
		return false, wrapDBError("pooler check", err)
	}
	defer prober.Release()
	// The holder is a connection of its own, not a second one of the pool: a pool of one
	// connection (or one busy to its last) would wait for the prober, held here, for ever.
	holder, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, wrapDBError("pooler check", err)
	}
	defer func() { _ = holder.Close(context.WithoutCancel(ctx)) }()
	// Behind a transaction pooler the prober's own first round trips may already land on
	// different server sessions (another client took the one it prepared on): that is the
	// mismatch too, not a failure of the check.
	failed := func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch {
			case mode == pgx.QueryExecModeCacheStatement && (pgErr.Code == "26000" || pgErr.Code == "42P05"):
				return &PoolerError{Mode: "cache_statement", Cause: err}
			case mode == pgx.QueryExecModeDescribeExec && (pgErr.Code == "26000" || pgErr.Code == "08P01"):
				return &PoolerError{Mode: "describe_exec", Cause: err}
			}
		}
		return wrapDBError("pooler check", err)
	}

	// What the prober runs: for cache_statement, a statement it prepared by name (a random
	// one, so that probes never collide on a shared session); else the statement itself.
	stmt := db.PoolerBackendPid
	if mode == pgx.QueryExecModeCacheStatement {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return false, fmt.Errorf("ratelimit: pooler check: %w", err)
		}
		stmt = "pgadmit_pooler_probe_" + hex.EncodeToString(b[:])
		if _, err := prober.Conn().Prepare(ctx, stmt, db.PoolerBackendPid); err != nil {
			return false, failed(err)
		}
		defer func() { _ = prober.Conn().Deallocate(context.WithoutCancel(ctx), stmt) }()
	}
	var before int32
	if err := prober.QueryRow(ctx, stmt).Scan(&before); err != nil {
		return false, failed(err)
	}
	tx, err := holder.Begin(ctx)
	if err != nil {
		return false, wrapDBError("pooler check", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := db.New().PoolerBackendPid(ctx, tx); err != nil {
		return false, wrapDBError("pooler check", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var after int32
	err = prober.QueryRow(pctx, stmt).Scan(&after)
	switch {
	case err == nil && (after == before || mode == pgx.QueryExecModeCacheStatement):
		// One session; or another one that the proxy carried the prepared statement over to.
		return true, nil
	case err == nil:
		return true, &PoolerError{Mode: "describe_exec", Cause: fmt.Errorf("one connection's statements ran on server sessions %d and %d", before, after)}
	case pctx.Err() != nil && ctx.Err() == nil:
		return false, nil // no second session to run on while the holder's transaction is open
	default:
		return false, failed(err)
	}
}
