package ratelimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// lateReads delays each read of a connection by late while its slow is set:
// the answer to a statement is on the wire and the connection reads it too
// late.
type lateReads struct {
	net.Conn
	slow *atomic.Bool
	late time.Duration
}

func (c lateReads) Read(b []byte) (int, error) {
	if c.slow.Load() {
		time.Sleep(c.late)
	}
	return c.Conn.Read(b)
}

// The storm test asserts that nothing is held only when no connection gave
// up a cancelled statement's answer (countedCancels). A connection whose
// answer came later than ConfigurePool's 250 ms after the cancel's
// acknowledgement is closed by pgx once the handler returned: it must be
// counted all the same, or a statement committed and never answered looks
// like a leak.
func TestCountedCancelsCountAnAnswerPastItsDeadline(t *testing.T) {
	t.Parallel()
	base := pgtest.NewPool(t)
	cfg, err := pgxpool.ParseConfig(base.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	var cancels countedCancels
	ratelimit.ConfigurePool(cfg)
	cancels.configure(cfg)
	var slow atomic.Bool
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil || slow.Load() { // the cancel request's connection reads in time
			return c, err
		}
		return lateReads{c, &slow, 1500 * time.Millisecond}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	scope := db.CounterListByScopeParams{ScopeType: "api_key", ScopeKey: uniqueKey("key")}
	// Prepared once in time: the statement is then sent, and its answer
	// read, as the Limiter's statements are.
	if _, err := queries.CounterListByScope(context.Background(), pool, scope); err != nil {
		t.Fatal(err)
	}

	slow.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = queries.CounterListByScope(ctx, pool, scope)
	slow.Store(false)
	if err == nil {
		t.Fatal("the statement was answered: its answer should have come past the deadline")
	}
	if n := cancels.cancelled(); n != 1 {
		t.Fatalf("%d statements cancelled, want 1", n)
	}
	if n := cancels.answersGivenUp(); n != 1 {
		t.Errorf("the statement's answer was given up (%v), but %d answers counted as given up", err, n)
	}
}
