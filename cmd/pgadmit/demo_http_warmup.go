package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// warmUp readies the gateway's pool before its first request, as the README advises a gateway
// that fails closed: it opens every connection the pool may hold and decides, on each, one
// admission of the gateway's kinds of limits through limiter, in a transaction it rolls back.
// A connection's first decision connects, then prepares and plans pgadmit's statement (the
// functions it calls plan theirs once per session): tens of ms, and on a loaded machine more
// than the decision timeout, which failed the demo's first requests closed (503). A Check
// would not do: it runs another statement, and the first Reserve after it took as long as on a
// cold connection (after a Ping, medians of 32-34 ms cold or after a Check against 6-9 ms after a
// rolled-back Reserve, 8 fresh pools each, on a loaded 2-core machine).
// Nothing stays: the scopes are the warm-up's own (prefix, no other transaction locks them)
// and the rollback takes back the rows. It returns how many connections it warmed.
func warmUp(ctx context.Context, pool *pgxpool.Pool, limiter *ratelimit.Limiter, prefix string) (int, error) {
	n := int(pool.Config().MaxConns)
	errs := make([]error, n)
	var warmed, done sync.WaitGroup
	warmed.Add(n)
	for i := range n {
		done.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err == nil {
				defer conn.Release() // once every goroutine holds a connection of its own
				err = warmConn(ctx, conn, limiter, warmUpLimits(prefix, i))
			}
			errs[i] = err
			warmed.Done()
			warmed.Wait()
		})
	}
	done.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("warming the gateway's pool: %w", err)
		}
	}
	return n, nil
}

// warmConn decides an admission of limits on conn in a transaction it rolls back.
func warmConn(ctx context.Context, conn *pgxpool.Conn, limiter *ratelimit.Limiter, limits []ratelimit.Limit) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = limiter.WithTx(tx).Reserve(ctx, "", "", limits)
	if rerr := tx.Rollback(ctx); err == nil {
		err = rerr
	}
	return err
}

// warmUpLimits are the kinds of limits of a gateway's request (gatewayLimits): requests and
// tokens per minute of a key, and a model's concurrency, on scopes of warm-up i's own.
func warmUpLimits(prefix string, i int) []ratelimit.Limit {
	key := ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("%swarm-up-%d", prefix, i)}
	model := ratelimit.Scope{Type: "model", Key: key.Key}
	return []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 1, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 1, Amount: 1},
		{Scope: model, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1, LeaseTTL: 30 * time.Second},
	}
}
