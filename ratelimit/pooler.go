package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

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

// closeProbeConn closes a connection of CheckPooler's, also when ctx has ended, within
// cleanupWait: it sends the server a goodbye and waits for no answer, but for a write.
func closeProbeConn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
	defer cancel()
	_ = conn.Close(cctx)
}
