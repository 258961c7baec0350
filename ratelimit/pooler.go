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
	"github.com/pgadmit/pgadmit/internal/poolerr"
)

// ErrPoolerMismatch is matched (errors.Is) by every *PoolerError, and by the errors of
// schema.Migrate, Down and Status that a statement-pooling proxy caused.
var ErrPoolerMismatch = poolerr.ErrMismatch

// ErrStatementPooling is matched (errors.Is) by a *PoolerError whose StatementPooling is set, and
// by the errors of schema.Migrate, Down and Status that a statement-pooling proxy caused: the
// proxy refused a transaction block (PgBouncer in pool_mode = statement closes the client
// connection with FATAL 08P01, transaction blocks not allowed in statement pooling mode).
var ErrStatementPooling = poolerr.ErrStatementPooling

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
// simple_protocol modes keep no such state. cache_statement meets 42P05 behind a pooler in
// session mode too when the pooler does not reset a server connection before handing it to the
// next client connection (PgBouncer with server_reset_query empty rather than DISCARD ALL).
//
// With StatementPooling set it reports, whatever the exec mode, a proxy that pools by statement
// (PgBouncer with pool_mode = statement): it runs no transaction of more than one statement,
// which a caller's transaction (Limiter.WithTx), Recover reclaiming expired tasks and
// schema.Migrate need.
//
// CheckPooler returns it when its probe sees the mismatch; every Limiter and Maintenance
// operation returns it too (wrapped: use errors.As or errors.Is with ErrPoolerMismatch) when
// it fails with the errors of cache_statement, or, with StatementPooling set, when a
// statement-pooling proxy refuses its transaction (Recover reclaiming expired tasks), so that
// the first failure says what to change. A caller's own transaction for Limiter.WithTx fails
// at the caller's Begin, with PgBouncer's error, before pgadmit sees it.
type PoolerError struct {
	// Mode is the pool's exec mode, as pgx names it in connection strings; empty when an
	// operation (not CheckPooler) reports statement pooling, which every exec mode meets.
	Mode string
	// StatementPooling is set when the proxy pools by statement.
	StatementPooling bool
	// Cause is what the probe saw.
	Cause error

	// op is the operation that met the pooler ("recover: reclaim expired tasks"), empty
	// for CheckPooler: the message names it after the package, once.
	op string
}

// Error says what to change.
func (e *PoolerError) Error() string {
	prefix := "ratelimit: "
	if e.op != "" {
		prefix += e.op + ": "
	}
	// One made by hand may have no Cause, nor Mode: the message leaves them out.
	cause := ""
	if e.Cause != nil {
		cause = fmt.Sprintf(" (%v)", e.Cause)
	}
	if e.StatementPooling {
		return fmt.Sprintf("%sthe connections go through a statement-pooling proxy, which runs no transaction "+
			"of more than one statement%s, and pgadmit needs them (Limiter.WithTx, Recover, schema.Migrate): %s",
			prefix, cause, poolerr.Advice)
	}
	mode := "pgx's exec mode"
	if e.Mode != "" {
		mode = "pgx's " + e.Mode + " exec mode"
	}
	msg := fmt.Sprintf("%sthe connections go through a transaction-pooling proxy, which runs one "+
		"connection's transactions on different server sessions, and %s needs one session%s: "+
		"add default_query_exec_mode=exec to the connection string (or set pgxpool.Config.ConnConfig.DefaultQueryExecMode "+
		"to pgx.QueryExecModeExec; cache_describe works too), or, for cache_statement, run PgBouncer 1.21 or later "+
		"with max_prepared_statements > 0", prefix, mode, cause)
	if e.Mode == "cache_statement" {
		// A session pooler that does not reset a server connection hands the next client
		// connection the statements of the last one: 42P05 too.
		msg += "; behind a pooler in session mode, which hands a server connection to the next client connection " +
			"with what the last one prepared, keep server_reset_query = DISCARD ALL (PgBouncer's default) instead"
	}
	return msg
}

// Is makes errors.Is(err, ErrPoolerMismatch) true, and errors.Is(err, ErrStatementPooling) when
// the proxy pools by statement.
func (e *PoolerError) Is(target error) bool {
	return target == ErrPoolerMismatch || (e.StatementPooling && target == ErrStatementPooling)
}

// Unwrap returns what the probe saw.
func (e *PoolerError) Unwrap() error { return e.Cause }

// ErrPoolerUnknown is returned (wrapped) by CheckPooler when its probe could not tell whether a
// proxy between the pool and the server keeps each client connection on one server session, so
// it neither reports a mismatch nor passes. A pooler in session mode always looks so: its
// connections keep their sessions, or, when it has no server connection to spare, the probe's
// gets none.
var ErrPoolerUnknown = errors.New("ratelimit: could not tell whether the connection pooler keeps one server session per connection")

// CheckPooler tells whether pgadmit's statements can run on pool as it is configured: it returns
// a *PoolerError when the pool's pgx exec mode is cache_statement (pgx's default) or
// describe_exec and its connections go through a proxy that may run one connection's
// transactions on different server sessions, and, whatever the exec mode, one with
// StatementPooling set when the proxy pools by statement. The exec, cache_describe and
// simple_protocol modes need no session state: they pass once a transaction of two statements
// ran, on one session.
//
// The probe takes a connection of the pool (the prober) and opens one of its own (the holder)
// for a moment. For cache_statement the holder first prepares a statement by name in a
// transaction, sees whether its session holds it under that name, and deallocates it there: a
// direct connection, and a pooler that does not carry prepared statements over (PgBouncer
// before 1.21, or without max_prepared_statements), keep the name; one that does renames it.
// The prober runs a statement (for describe_exec in that mode; for cache_statement, where names
// are kept, in exec mode, else one it prepared by name); the holder opens a transaction and
// runs one too, which behind a transaction pooler takes the session the prober just gave back
// (PgBouncer hands out the most recently released server connection first); then the prober
// runs its statement again. It is a mismatch when the holder lands on the prober's session
// (sessions are shared between client connections: for cache_statement, where names are kept,
// the statement caches of the connections that share one meet each other's statements), or
// when the prober's second statement runs on another session, or fails as the exec mode does
// there. A statement the prober prepared by name that runs on two sessions was carried over by
// the proxy (PgBouncer 1.21+ with max_prepared_statements): that passes. CheckPooler leaves no
// statement of its own on a server session: where names are kept it prepares one only in a
// transaction and deallocates it there (it used to prepare the prober's outside one, and its
// deallocation could land on another session); behind a proxy that renames them the server's
// copies are the proxy's.
//
// Behind a busy proxy another client may take the prober's session instead, and the prober may
// land back on its own by chance, so the probe runs up to five times. A connection whose backend
// process id given at login is its session's is direct (a proxy gives its own): that passes at the
// first probe. When no probe saw sessions shared or moved through a proxy, CheckPooler cannot tell
// a pooler in session mode from a transaction pooler that gave the prober its session back every
// time, and returns an error matching ErrPoolerUnknown rather than passing; the exec modes above
// make the question moot. Its message says how many probes saw the prober keep its session and
// how many saw its second statement wait for one in vain (2 s) while the holder's transaction
// was open: a proxy with no other session to spare queues it so, and that probe sees nothing.
// It returns one too, whatever the exec mode, when the holder or the prober gets no server
// session within 5 s (nor an answer to its connection's start-up), or the prober no connection
// of the pool, every one in use, rather than wait until ctx ends: behind a pooler in session
// mode every client connection keeps the one it got (the holder too), and the pooler may have
// none to spare. When the prober's statement run again gets no answer within 2 s on a direct
// connection (no pooler could make it wait for a session), or a statement of the holder's in
// its transaction none within 5 s, it returns an error saying that the server gave none.
//
// When ctx ends, CheckPooler returns an error matching ctx's error (errors.Is) as soon as the
// statement in flight gives up: at once with pgx's handling of a context's end, and with
// ConfigurePool's, which asks the server to cancel the statement, within about a second on a
// server that does not answer. It waits for no clean-up then: it closes its connections instead
// of rolling back or deallocating, and takes the pool's out of the pool (see below). Its
// clean-ups wait 5 s at most. So no wait of its own outlasts its bound, ctx's deadline or none:
// on a server that stops answering anywhere in it, CheckPooler(context.Background(), pool) ends
// within about 11 s (a wait and a clean-up, and with ConfigurePool's handling a second for a
// cancel request left unanswered), where it used to wait for ever for the holder's connection or
// for the answer to a statement in one of its transactions.
//
// The connection of the pool that the probe took is back in the pool when CheckPooler returns:
// given back, or, when the probe gave up on a statement of it (ctx ended, or a bound of the
// probe's passed: behind a pooler with no server session to spare the statement waits in the
// pooler's queue), taken out of the pool at once (pgxpool.Conn.Hijack, and the pool's
// BeforeClose called), so that the pool may open another in its place. pgx closes such a
// connection in the background: it sends a cancel request, waits up to 15 s for its answer (a
// pooler that forwards it only once a server connection comes free answers late), and says
// goodbye. Until then the connection is still open to the pooler (behind a pooler in session
// mode, with a server connection), but no longer one of the pool's, which used to count it as
// acquired until then: a pool of two had one connection for up to 15 s after CheckPooler
// returned, and a caller retrying the check could be left none. It leaves nothing on a server
// session: the probe's connection of the pool holds no transaction, and what it prepared by name
// is the proxy's (see above).
//
// Run it at start-up or from a health check, not on a hot path. A nil pool is a
// *ValidationError on "pool".
func CheckPooler(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return &ValidationError{Field: "pool", Value: nil, Reason: "must be a pool, not nil"}
	}
	if err := validContext(ctx); err != nil {
		return err
	}
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	// The holder is a connection of its own, not a second one of the pool: a pool of one
	// connection (or one busy to its last) would wait for the prober, held, for ever. It runs
	// in exec mode, so that it leaves no statement of its own on the sessions it lands on.
	cfg := pool.Config().ConnConfig.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	holder, err := connectHolder(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeProbeConn(ctx, holder)
	namesKept, err := checkTransaction(ctx, holder, mode)
	if err != nil {
		return err
	}
	if mode != pgx.QueryExecModeCacheStatement && mode != pgx.QueryExecModeDescribeExec {
		return nil
	}
	waited := 0 // probes whose prober's second statement got no session (probeWaited)
	for range poolerProbes {
		saw, err := probePooler(ctx, pool, holder, mode, namesKept)
		switch {
		case errors.Is(err, errNoSpareSession):
			return fmt.Errorf("ratelimit: pooler check: pgx's %s exec mode needs one server session per "+
				"connection, and %w; default_query_exec_mode=exec needs no session state", execModeName(mode), err)
		case err != nil:
			return err
		case saw == probeCarriedOver, saw == probeDirect:
			return nil
		case saw == probeWaited:
			waited++
		}
	}
	return fmt.Errorf("%w: pgx's %s exec mode needs one, and in %d probes through a proxy (the connection's "+
		"backend process id is the proxy's, not its session's)%s; default_query_exec_mode=exec needs no session state",
		ErrPoolerUnknown, execModeName(mode), poolerProbes, probesSaw(poolerProbes-waited, waited))
}

// probesSaw says what CheckPooler's probes saw when none told (after "in 5 probes through a
// proxy (...)"): in kept of them the prober kept its session (probeOneSession), in waited its
// second statement waited for one in vain (probeWaited). A probe that only waited saw neither
// where the prober's statement would run nor whether another connection got its session.
func probesSaw(kept, waited int) string {
	const keptSaw = "the connection kept its server session and no other connection was given it"
	const keptWhy = "a pooler in session mode does that, and one in transaction mode may by chance"
	waitedSaw := fmt.Sprintf("second statement got no server session within %s while the check's other connection "+
		"held a transaction open", proberWait)
	const waitedWhy = "the proxy queued it, having no other server session to spare, or the server stopped answering: " +
		"where it would run was not seen"
	switch {
	case waited == 0:
		return " " + keptSaw + ": " + keptWhy
	case kept == 0:
		return " the connection's " + waitedSaw + " (" + waitedWhy + ")"
	}
	return fmt.Sprintf(": in %d %s (%s), and in %d its %s (%s)", kept, keptSaw, keptWhy, waited, waitedSaw, waitedWhy)
}

// connectHolder opens CheckPooler's own connection of cfg, waiting sessionWait at most for the
// server's (or the pooler's) answer.
func connectHolder(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	holder, err := pgx.ConnectConfig(cctx, cfg)
	switch {
	case err == nil:
		return holder, nil
	case cctx.Err() != nil && ctx.Err() == nil:
		return nil, errorf("ratelimit: pooler check: %w", errNoSpareSession)
	}
	return nil, wrapDBError(ctx, "pooler check", err)
}

// checkTransaction runs a transaction of two statements on holder and returns a *PoolerError
// with StatementPooling set when the proxy refuses it (PgBouncer in statement mode closes the
// connection with FATAL 08P01, transaction blocks not allowed in statement pooling mode) or runs
// its statements on different sessions. For cache_statement it also tells whether a statement
// prepared by name is on the session under that name (namesKept; see preparedNameKept).
func checkTransaction(ctx context.Context, holder *pgx.Conn, mode pgx.QueryExecMode) (namesKept bool, err error) {
	statementPooling := func(cause error) error {
		return &PoolerError{Mode: execModeName(mode), StatementPooling: true, Cause: cause}
	}
	failed := func(err error) error {
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, errNoAnswer):
			return err
		case errors.As(err, &pgErr) && pgErr.Code == "08P01" && pgErr.Severity == "FATAL":
			return statementPooling(err)
		}
		return wrapDBError(ctx, "pooler check", err)
	}
	tx, err := beginWithin(ctx, holder)
	if errors.Is(err, errNoSpareSession) {
		return false, errorf("ratelimit: pooler check: %w", err)
	}
	if err != nil {
		return false, failed(err)
	}
	defer func() { undoOrClose(ctx, holder, err == nil, tx.Rollback) }()
	var pids [2]int32
	for i := range pids {
		if pids[i], err = sessionOf(ctx, tx); err != nil {
			return false, failed(err)
		}
	}
	if pids[0] != pids[1] {
		return false, statementPooling(fmt.Errorf("one transaction's statements ran on server sessions %d and %d", pids[0], pids[1]))
	}
	if mode != pgx.QueryExecModeCacheStatement {
		return false, nil
	}
	if namesKept, err = preparedNameKept(ctx, holder, tx); err != nil {
		return false, failed(err)
	}
	return namesKept, nil
}

// preparedNameKept prepares a statement by name on holder, in its transaction tx, tells whether
// the session holds it under that name, and deallocates it, all on the session tx holds: it
// leaves nothing there. A proxy that carries prepared statements over between server sessions
// (PgBouncer 1.21+ with max_prepared_statements) prepares it under a name of its own; a direct
// connection, a pooler that does not (PgBouncer before 1.21, or without max_prepared_statements),
// under the client's. Behind the latter, client connections that share a session meet each
// other's statements: the sessions alone then tell the mismatch, and the probe prepares nothing.
func preparedNameKept(ctx context.Context, holder *pgx.Conn, tx pgx.Tx) (kept bool, err error) {
	name, err := probeStatementName()
	if err != nil {
		return false, err
	}
	err = answered(ctx, func(ctx context.Context) error {
		_, err := holder.Prepare(ctx, name, db.PoolerBackendPid)
		return err
	})
	if err != nil {
		return false, err
	}
	err = answered(ctx, func(ctx context.Context) (err error) {
		kept, err = db.New().PoolerStatementPrepared(ctx, tx, name)
		return err
	})
	if err != nil {
		return false, err
	}
	return kept, answered(ctx, func(ctx context.Context) error { return holder.Deallocate(ctx, name) })
}

// beginWithin begins a transaction on holder, waiting sessionWait at most for a server session:
// behind a pooler in session mode whose server connections all stay with other client
// connections, it would wait for ever (or the pooler's query_wait_timeout). When that bound
// passed first (ctx did not end), the error is errNoSpareSession; else it is Begin's.
func beginWithin(ctx context.Context, holder *pgx.Conn) (pgx.Tx, error) {
	bctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	tx, err := holder.Begin(bctx)
	if err != nil && bctx.Err() != nil && ctx.Err() == nil {
		return nil, errNoSpareSession
	}
	return tx, err
}

// sessionOf reads the backend process id of the server session that tx holds, waiting
// answerWait at most for the answer (answered).
func sessionOf(ctx context.Context, tx pgx.Tx) (pid int32, err error) {
	err = answered(ctx, func(ctx context.Context) (err error) {
		pid, err = db.New().PoolerBackendPid(ctx, tx)
		return err
	})
	return pid, err
}

// probeStatementName is a name for a statement that CheckPooler prepares: a random one, so that
// checks never collide on a shared session.
func probeStatementName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", errorf("ratelimit: pooler check: %w", err)
	}
	return "pgadmit_pooler_probe_" + hex.EncodeToString(b[:]), nil
}

// answerWait bounds how long CheckPooler waits for the answer to a statement on a session that
// its connection holds in a transaction: no pooler can make that wait for a session.
const answerWait = 5 * time.Second

// errNoAnswer is CheckPooler's error when the server gave no answer within answerWait to a
// statement in a transaction of its own (answered).
var errNoAnswer = fmt.Errorf("ratelimit: pooler check: the server gave no answer within %s to a statement in "+
	"a transaction (no pooler could make it wait for a server session)", answerWait)

// answered runs a statement of CheckPooler's (run) on a session held in a transaction, with ctx
// bounded by answerWait: when that bound passes first, the error is errNoAnswer, which does not
// wrap run's (ctx did not end).
func answered(ctx context.Context, run func(context.Context) error) error {
	actx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	err := run(actx)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w: %v", errNoAnswer, err)
	}
	return err
}

// poolerProbes bounds the runs of CheckPooler's probe that see neither sessions shared nor moved.
const poolerProbes = 5

// sessionWait bounds how long a connection of CheckPooler waits for a server session.
const sessionWait = 5 * time.Second

// errNoSpareSession is CheckPooler's answer when one of its connections got no server session
// within sessionWait (directness cannot be told before a first answer, so a frozen server is
// named among the causes).
var errNoSpareSession = fmt.Errorf("%w: a connection of the check got no server session within %s: a pooler "+
	"in session mode whose server connections are all taken does that (each client connection keeps one, and "+
	"the check needs one more, two with cache_statement or describe_exec), a transaction pooler only when its "+
	"connections stay busy, and so does a server that stopped answering", ErrPoolerUnknown, sessionWait)

// errNoPoolConn is CheckPooler's answer when every connection of the pool stayed in use for
// sessionWait, so that its probe got none.
var errNoPoolConn = fmt.Errorf("%w: no connection of the pool came free within %s for the check's probe "+
	"(every one was in use)", ErrPoolerUnknown, sessionWait)

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

// cleanupWait bounds a clean-up of CheckPooler's (a rollback, a deallocation, a close), which
// one round trip does on a session that has just answered.
const cleanupWait = 5 * time.Second

// undoOrClose undoes with undo what CheckPooler left on conn (a transaction, a prepared
// statement) when conn is used again (keep), ctx has not ended, and the server answers within
// cleanupWait; else it closes conn, which undoes it on the server without waiting for an answer
// (a pooled connection closed is dropped by its pool). A server that stopped answering then
// holds CheckPooler neither for ever nor past ctx's end.
func undoOrClose(ctx context.Context, conn *pgx.Conn, keep bool, undo func(context.Context) error) {
	if keep && ctx.Err() == nil {
		uctx, cancel := context.WithTimeout(ctx, cleanupWait)
		err := undo(uctx)
		cancel()
		if err == nil {
			return
		}
	}
	closeProbeConn(ctx, conn)
}

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

// closeProbeConn closes a connection of CheckPooler's, also when ctx has ended, within
// cleanupWait: it sends the server a goodbye and waits for no answer, but for a write.
func closeProbeConn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
	defer cancel()
	_ = conn.Close(cctx)
}
