package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Warm readies the Limiter's connections before its first requests, and
// returns how many it warmed. The first admission on a new connection pays
// for connecting and for preparing and planning pgadmit's statements (the
// functions they call plan theirs once per session): tens of ms against a
// few once warm, more than a gateway's decision timeout on a loaded machine.
// Call it once at start-up, before the Limiter serves.
//
// On a pool (a *pgxpool.Pool, or an Executor of one's own that embeds one)
// Warm opens as many connections as the pool may hold (MaxConns), less
// those acquired elsewhere when it starts, and holds them all at once, so
// that none is warmed twice. On a single connection it warms that one. On
// each it begins a transaction, decides one Reserve of limits in it, then
// one Commit of what it granted, and rolls the transaction back: nothing
// is counted, held or written. limits are the caller's kinds of limits (a
// gateway's request's, say), so that the statements warmed are those its
// requests run; their scope keys are replaced by keys of the warm-up's own
// (random, one set per connection), which no request uses and no other
// transaction waits for. A Local limit is decided in the database, as in a
// caller's transaction: no block is taken (the statements of blocks are not
// warmed). A limit refused (an Amount above its Limit) still warms the
// Reserve statement, not the Commit one.
//
// Connections the pool opens later (replacing one that MaxConnLifetime or
// MaxConnIdleTime ended, or one lost) are cold again; MinConns keeps some
// open, not warm.
//
// Bad input is a *ValidationError, and nothing is sent: limits Reserve
// refuses, limits with nothing to reserve (none, or every Amount 0, which
// Reserve sends nothing for), a Limiter inside a caller's transaction
// (WithTx, or New on a pgx.Tx: warm the connections before), and an
// Executor of one's own that shows neither a pool nor a connection (Warm
// could not tell how many connections it has).
//
// When ctx ends, Warm returns ctx's error; nothing is held (a connection
// whose statement was cut is closed, which ends its transaction). Any other
// failure (a connection that could not be opened) returns the first error,
// and the count 0: the transactions are rolled back all the same.
func (l *Limiter) Warm(ctx context.Context, limits []Limit) (int, error) {
	if err := l.callable(ctx); err != nil {
		return 0, err
	}
	a, err := newAdmission("", "", limits)
	if err != nil {
		return 0, err
	}
	if a.empty() {
		return 0, &ValidationError{Field: "Limits", Value: len(limits), Reason: "nothing to warm: no limit with an Amount above 0 (Reserve sends nothing then)"}
	}
	if l.inTx {
		return 0, &ValidationError{Field: "Limiter", Value: "in a transaction",
			Reason: "Warm readies a pool's connections: call it on the Limiter made on the pool, not inside a transaction"}
	}
	n, err := warmConns(l.conn)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	prefix, err := warmPrefix()
	if err != nil {
		return 0, err
	}
	errs := make([]error, n)
	var warmed, done sync.WaitGroup
	warmed.Add(n)
	for i := range n {
		done.Go(func() {
			errs[i] = l.warmOne(ctx, warmLimits(limits, fmt.Sprintf("%s/%d/", prefix, i)), warmed.Done, warmed.Wait)
		})
	}
	done.Wait()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// warmOne begins a transaction on a connection of l's, decides an admission
// of limits in it and commits what it granted, then, once every warm-up
// holds its connection (decided, then wait: a barrier), rolls it back.
// The Commit goes through a Limiter of its own: the lock-order guard of
// WithTx refuses a Commit after a Reserve in one transaction, against
// deadlocks with other transactions, which the warm-up's own scopes cannot
// meet.
func (l *Limiter) warmOne(ctx context.Context, limits []Limit, decided, wait func()) error {
	tx, err := l.conn.Begin(ctx)
	if err != nil {
		decided()
		return wrapDBError(ctx, "warm", err)
	}
	grant, err := l.WithTx(tx).Reserve(ctx, "", "", limits)
	if err == nil {
		_, err = l.WithTx(tx).Commit(ctx, grant, nil)
	} else if errors.Is(err, ErrExceeded) {
		err = nil // decided: the Reserve statement ran
	}
	decided()
	wait() // so that no other warm-up takes this connection
	if rerr := tx.Rollback(ctx); err == nil && rerr != nil {
		err = wrapDBError(ctx, "warm", rerr)
	}
	return err
}

// warmConns is how many connections Warm warms on conn: a pool's MaxConns,
// less those acquired elsewhere (which it would wait for, holding the
// others), or 1 for a single connection.
func warmConns(conn Executor) (int, error) {
	if pool, ok := shownPool(conn); ok {
		n := int(pool.Config().MaxConns)
		if s, ok := pool.(interface{ Stat() *pgxpool.Stat }); ok {
			n -= int(s.Stat().AcquiredConns())
		}
		return max(n, 1), nil
	}
	if v, ok := shownConn(conn); ok && v.CanInterface() { // a connection (showsConn's others)
		return 1, nil
	}
	if nc, ok := conn.(noConn); ok {
		return 0, nc.err
	}
	return 0, &ValidationError{Field: "conn", Value: fmt.Sprintf("%T", conn),
		Reason: "Warm needs a pool or a connection it can see (embed the *pgxpool.Pool in an Executor of one's own) to tell how many connections to warm"}
}

// warmPrefix is the start of the warm-up's scope keys: random, so that no
// request's key and no other warm-up's (another process's) is one of them.
func warmPrefix() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ratelimit: warm-up key: %w", err)
	}
	return "pgadmit-warm-up/" + hex.EncodeToString(b[:]), nil
}

// warmLimits are limits on keys of prefix's: the same shape (scope types,
// metrics, windows, which limits share a scope), with keys no request uses.
func warmLimits(limits []Limit, prefix string) []Limit {
	type scope struct{ typ, key string }
	keys := map[scope]string{}
	out := make([]Limit, len(limits))
	for i, lim := range limits {
		s := scope{lim.Scope.Type, lim.Scope.Key}
		key, ok := keys[s]
		if !ok {
			key = fmt.Sprintf("%s%d", prefix, len(keys))
			keys[s] = key
		}
		out[i] = lim
		out[i].Scope.Key = key
	}
	return out
}
