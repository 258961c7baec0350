package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter on one connection (here a pool's *pgxpool.Conn) does not
// combine: combining lets a caller leave while its statement runs on, and a
// caller who left and called again at once sent its next statement on the
// connection still busy with the first ("conn busy"). Alone, a caller
// returns once its statement is answered and what it was granted released,
// so the connection is free when it calls again.
func TestOneConnectionIsFreeWhenACallerWhoLeftCallsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A long grace: the statement is never cancelled here (on a plain
	// connection pgx closes it when it cancels), it is answered.
	l := ratelimit.New(conn, ratelimit.WithLeftStatementGrace(time.Minute))
	defer l.Close()
	key := uniqueKey("oneconn")
	// An hour's window (or a few minutes more) with a minute left: the
	// second Reserve must meet the locked counter of the first (CI once saw
	// a minute's window end between them, and the second never waited).
	limits := hourLimits(t, pool, window("model", key, ratelimit.MetricRequests, 10, 1))
	if _, err := l.Reserve(ctx, "", "", limits); err != nil { // the counter row, to lock
		t.Fatal(err)
	}
	unlock := lockCounter(t, pool, key)
	defer unlock()

	leave, cancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() {
		_, err := l.Reserve(leave, "", "", limits) // waits for the locked counter
		errs <- err
		_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{window("model", uniqueKey("next"), ratelimit.MetricRequests, 10, 1)})
		errs <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "the first Reserve")
	cancel()
	// Combining, the first call returned at once and the second went out
	// on the busy connection within microseconds; give it the time to.
	time.Sleep(50 * time.Millisecond)
	unlock()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("the call whose caller left: %v, want context.Canceled", err)
	}
	if err := <-errs; err != nil {
		t.Errorf("the next call on the connection: %v, want admitted", err)
	}
	assertBooksBalance(t, pool, "model", key) // what the caller who left was granted went back
}
