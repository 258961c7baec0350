package ratelimit_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind a PgBouncer in transaction mode that keeps prepared statements under their own names
// (1.18, as the tests run; later ones without max_prepared_statements), CheckPooler on a pool in
// cache_statement mode reports the mismatch and leaves no prepared statement of its own on any
// server session, quiet or busy: the next client of that session would meet it, the very
// mismatch it reports. It used to prepare its probe statement by name on whatever session the
// pooler gave it and deallocate it on whatever session the pooler gave it next, which behind a
// busy pooler was often another one.
func TestCheckPoolerLeavesNoPreparedStatementBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for _, busy := range []bool{false, true} {
		name := "quiet"
		if busy {
			name = "busy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pooled, _ := pgtest.NewPoolerURLIn(t, "transaction", pgtest.PoolerSize)
			if busy {
				defer keepBusy(t, pooled)()
			}
			probe := poolsOn(t, pooled, 1, pgx.QueryExecModeCacheStatement)[0]
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := ratelimit.CheckPooler(ctx, probe)
				cancel()
				if !errors.Is(err, ratelimit.ErrPoolerMismatch) && !errors.Is(err, ratelimit.ErrPoolerUnknown) {
					t.Fatalf("CheckPooler(cache_statement behind PgBouncer) = %v, want a *PoolerError", err)
				}
			}
			probe.Close()
			for pid, names := range preparedOnEveryServerSession(t, pooled, pgtest.PoolerSize) {
				if len(names) != 0 {
					t.Errorf("server session %d holds prepared statements %q after CheckPooler; want none", pid, names)
				}
			}
		})
	}
}

// keepBusy runs Reserves and Releases from four pools in exec mode through the pooler at pooled
// until the returned stop is called, which waits for them to end and closes their pools: for
// keepBusyStopWait at most, after which it fails the test naming the loops that did not stop,
// with every goroutine's stack, and leaves their pools open (a pool's Close waits for the
// connection a hung loop holds). It used to wait for ever: a hung loop held the test until go
// test's timeout, and its dump was all there was to read.
func keepBusy(t *testing.T, pooled string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := modeConfig(t, pooled, pgx.QueryExecModeExec)
	pools := make([]*pgxpool.Pool, 4)
	for i := range pools {
		var err error
		if pools[i], err = pgxpool.NewWithConfig(context.Background(), cfg.Copy()); err != nil {
			cancel()
			for _, p := range pools[:i] {
				p.Close()
			}
			t.Fatal(err)
		}
	}
	done := make([]chan struct{}, len(pools))
	for i, p := range pools {
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			l := ratelimit.New(p)
			key := uniqueKey("load")
			for ctx.Err() == nil {
				if g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, ratelimit.MetricTokens, 1e12, 1)}); err == nil {
					_, _ = l.Release(ctx, g, "done")
				}
			}
		}()
	}
	return func() {
		t.Helper()
		cancel()
		deadline := time.NewTimer(keepBusyStopWait)
		defer deadline.Stop()
	wait:
		for _, d := range done {
			select {
			case <-d:
			case <-deadline.C:
				break wait
			}
		}
		if stuck := closeStopped(pools, done); len(stuck) > 0 {
			buf := make([]byte, 1<<20)
			t.Errorf("the Reserve and Release loops of busy pools %v (of %d) did not stop within %s of their context's cancellation; their pools are left open; goroutines:\n%s",
				stuck, len(pools), keepBusyStopWait, buf[:runtime.Stack(buf, true)])
		}
	}
}

// keepBusyStopWait bounds how long keepBusy's stop waits for its loops.
const keepBusyStopWait = 30 * time.Second

// closeStopped closes each pool whose loop is done (done[i] closed) and returns the indexes
// of the others, whose loops still run.
func closeStopped(pools []*pgxpool.Pool, done []chan struct{}) (running []int) {
	for i, p := range pools {
		select {
		case <-done[i]:
			p.Close()
		default:
			running = append(running, i)
		}
	}
	return running
}

// preparedOnEveryServerSession returns the prepared statements of each of the size server
// sessions of the transaction pooler at pooled, by backend process id: it holds a transaction
// open on size connections of its own at once, so that each runs on a session of its own, and
// fails the test when they did not see size sessions.
func preparedOnEveryServerSession(t *testing.T, pooled string, size int) map[int32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := modeConfig(t, pooled, pgx.QueryExecModeExec)
	cfg.MaxConns = int32(size)
	pool := poolsFrom(t, cfg, 1)[0]
	txs := make([]pgx.Tx, size)
	for i := range txs {
		var err error
		if txs[i], err = pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = txs[i].Rollback(context.Background()) }()
	}
	prepared := map[int32][]string{}
	for _, tx := range txs {
		pid, err := queries.PoolerBackendPid(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		state, err := testq.SessionStateLeft(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		prepared[pid] = state.PreparedStatements
	}
	if len(prepared) != size {
		t.Fatalf("%d transactions held open at once ran on %d server sessions, want %d", size, len(prepared), size)
	}
	return prepared
}
