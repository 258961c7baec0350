package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// These tests make a caller of Reserve leave in the moment between the
// server's commit of its statement and the client's reading of the answer:
// the server has granted, and nothing it granted may stay held (a lease
// until its TTL, a reservation until its window ends).

// heldAnswers holds back, on the connections of a pool, the server's
// answer to any statement that names a key, until let is called: the
// server commits the statement, the client does not learn of it yet. A
// read held back ends early when the connection's deadline passes, as pgx
// sets it when a context ends.
type heldAnswers struct {
	key  []byte
	once sync.Once
	let  chan struct{}
}

func (h *heldAnswers) release() { h.once.Do(func() { close(h.let) }) }

type heldConn struct {
	net.Conn
	h        *heldAnswers
	mu       sync.Mutex
	held     bool // this connection sent a statement naming the key
	deadline time.Time
	pending  []byte // read while held by a Read begun before the statement was written
}

func (c *heldConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.h.key) {
		c.mu.Lock()
		c.held = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

// Read holds back what comes once a statement naming the key was written,
// also when the Read that receives it began before: pgx's background
// reader (started when a write takes over 15 ms) reads so. That data waits
// in pending until the answers are let go.
func (c *heldConn) Read(b []byte) (int, error) {
	for {
		held, deadline := c.heldNow()
		if held {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return 0, os.ErrDeadlineExceeded
			}
			time.Sleep(time.Millisecond)
			continue
		}
		c.mu.Lock()
		if len(c.pending) > 0 {
			n := copy(b, c.pending)
			c.pending = c.pending[n:]
			c.mu.Unlock()
			return n, nil
		}
		c.mu.Unlock()
		n, err := c.Conn.Read(b)
		if held, _ := c.heldNow(); !held || n == 0 || err != nil {
			return n, err
		}
		c.mu.Lock()
		c.pending = append(c.pending, b[:n]...)
		c.mu.Unlock()
	}
}

// heldNow reports whether reads are held now, and the read deadline.
func (c *heldConn) heldNow() (bool, time.Time) {
	c.mu.Lock()
	held, deadline := c.held, c.deadline
	c.mu.Unlock()
	select {
	case <-c.h.let:
		held = false
	default:
	}
	return held, deadline
}

func (c *heldConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *heldConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// holdAnswers returns a pool on pool's database whose connections hold
// back the answers to statements naming key (heldAnswers).
func holdAnswers(t *testing.T, pool *pgxpool.Pool, key string) (*pgxpool.Pool, *heldAnswers) {
	t.Helper()
	h := &heldAnswers{key: []byte(key), let: make(chan struct{})}
	t.Cleanup(h.release)
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: conn, h: h}, nil
	}
	held, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(held.Close)
	return held, h
}

// awaitOpen waits until the scope's open reservations, committed, are n.
func awaitOpen(t *testing.T, pool *pgxpool.Pool, scopeType, key string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if openReservations(t, pool, scopeType, key) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:%s: %d reservations open, never %d", scopeType, key, openReservations(t, pool, scopeType, key), n)
		}
	}
}

func openReservations(t *testing.T, pool *pgxpool.Pool, scopeType, key string) int64 {
	t.Helper()
	totals, err := testq.ReservationTotalsByScope(context.Background(), pool, dbtest.ReservationTotalsByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		t.Fatalf("ReservationTotalsByScope: %v", err)
	}
	var open int64
	for _, row := range totals {
		open += row.OpenCount
	}
	return open
}

// assertNothingHeld checks that a scope holds no reserved amount, no open
// reservation and no live lease.
func assertNothingHeld(t *testing.T, pool *pgxpool.Pool, scopeType, key string) {
	t.Helper()
	for _, c := range counterRows(t, pool, scopeType, key) {
		if c.ReservedValue != 0 {
			t.Errorf("%s:%s %s: reserved %v held for callers who left", scopeType, key, c.Metric, c.ReservedValue)
		}
	}
	if open := openReservations(t, pool, scopeType, key); open != 0 {
		t.Errorf("%s:%s: %d reservations open for callers who left", scopeType, key, open)
	}
	if live := liveLeases(t, pool, scopeType, key); live != 0 {
		t.Errorf("%s:%s: %d live leases held for callers who left", scopeType, key, live)
	}
	assertBooksBalance(t, pool, scopeType, key)
}

// callerModes are the two ways a caller alone sends its statement:
// combined (the default) and WithoutCombining.
var callerModes = []struct {
	name string
	opts []ratelimit.Option
}{
	{"combined", nil},
	{"without combining", []ratelimit.Option{ratelimit.WithoutCombining()}},
}

// holdCounter returns the limits of a caller who will wait for a lock, and
// the open transaction that holds it: it reserved on the same counter row
// (an hour's window or a few minutes more, so that no window ends
// meanwhile). Roll it back to release the lock; the test's end does.
func holdCounter(t *testing.T, pool *pgxpool.Pool, key string) ([]ratelimit.Limit, pgx.Tx) {
	t.Helper()
	limits := hourLimits(t, pool, window("key", key, "requests", 100, 1), concurrent("key", key, 10))
	blocker, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocker.Rollback(context.Background()) })
	if _, err := ratelimit.New(pool).WithTx(blocker).Reserve(context.Background(), "", "", limits); err != nil {
		t.Fatal(err)
	}
	return limits, blocker
}

// reserveBehindLock starts a Reserve of limits that waits for the lock
// holdCounter holds, and returns once it waits: leave ends its caller's
// context, and errs gets what Reserve returned.
func reserveBehindLock(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, limits []ratelimit.Limit) (leave context.CancelFunc, errs <-chan error) {
	t.Helper()
	ctx, leave := context.WithCancel(context.Background())
	t.Cleanup(leave)
	done := make(chan error, 1)
	go func() { _, err := l.Reserve(ctx, "", "", limits); done <- err }()
	pgtest.AwaitLockWaiters(t, pool, "Reserve")
	return leave, done
}

// A caller alone, combined (the default) or not, who leaves after the
// server committed its statement but before the answer came back gets its
// context's error, and what the statement granted is given back: it used
// to stay held, a reservation until its window ended and a lease until its
// TTL.
func TestReserveCallerWhoLeavesAfterTheCommitHoldsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range callerModes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			key := uniqueKey("k")
			held, answers := holdAnswers(t, pool, key)
			l := ratelimit.New(held, append(tc.opts, ratelimit.WithLeftStatementGrace(time.Minute))...)
			limits := []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)}

			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
			awaitOpen(t, pool, "key", key, 1) // the server committed; its answer is held
			leave()
			time.Sleep(20 * time.Millisecond)
			answers.release()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			l.Close()
			assertNothingHeld(t, pool, "key", key)
		})
	}
}

// Callers combined in one statement, who all leave after the server
// committed it but before its answer came back, hold nothing once it is
// read; meanwhile the Limiter's next call does not wait for it. The
// statement used to be cancelled once they had all left, and its grants
// stayed held.
func TestReserveCallersWhoAllLeaveABatchHoldNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	key := uniqueKey("k")
	held, answers := holdAnswers(t, pool, key)
	l := ratelimit.New(held, ratelimit.WithLeftStatementGrace(time.Minute))
	first := uniqueKey("first")
	firstLimits := []ratelimit.Limit{window("key", first, "requests", 100, 1)}
	firstLimits[0].Window = hourWindow(t, pool) // the blocker and the first Reserve meet on one counter row
	limits := []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 100)}

	// A caller who stays holds the stream, stuck behind a lock, while the
	// others queue behind it.
	blocker, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }()
	if _, err := l.WithTx(blocker).Reserve(context.Background(), "", "", firstLimits); err != nil {
		t.Fatal(err)
	}
	firstErr := make(chan error, 1)
	go func() { _, err := l.Reserve(context.Background(), "", "", firstLimits); firstErr <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the first Reserve")
	const callers = 16
	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, callers)
	for range callers {
		go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
	}
	for deadline := time.Now().Add(5 * time.Second); l.QueuedReserves() < callers; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", l.QueuedReserves(), callers)
		}
	}
	if err := blocker.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-firstErr; err != nil {
		t.Fatalf("the first Reserve: %v", err)
	}
	awaitOpen(t, pool, "key", key, callers) // one statement, committed; its answer is held
	leave()
	for range callers {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller who left: %v, want context.Canceled", err)
		}
	}
	octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ocancel()
	g, err := l.Reserve(octx, "", "", []ratelimit.Limit{window("key", uniqueKey("other"), "requests", 100, 1)})
	if err != nil {
		t.Fatalf("a Reserve on another scope, while the statement its callers left is unanswered: %v", err)
	}
	if _, err := l.Release(octx, g, "test"); err != nil {
		t.Fatal(err)
	}
	answers.release()
	l.Close()
	if s := l.Stats().Reserve; s.Requests != callers+2 {
		t.Errorf("%d requests sent, want %d", s.Requests, callers+2)
	}
	assertNothingHeld(t, pool, "key", key)
}

// A Commit whose caller leaves after the server committed it, before the
// answer came back, returns the context's error; the grant is settled all
// the same, and calling again (what the error tells the caller to do) is a
// no-op that says so: nothing is settled twice, and nothing stays held.
func TestCommitCallerWhoLeavesAfterTheCommitCanRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range callerModes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			key := uniqueKey("k")
			direct := ratelimit.New(pool)
			defer direct.Close()
			grant, err := direct.Reserve(context.Background(), "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 100), concurrent("api_key", key, 10)})
			if err != nil {
				t.Fatal(err)
			}
			held, answers := holdAnswers(t, pool, key)
			l := ratelimit.New(held, append(tc.opts, ratelimit.WithLeftStatementGrace(time.Minute))...)

			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			go func() { _, err := l.Commit(ctx, grant, map[string]float64{"tokens": 70}); errs <- err }()
			awaitOpen(t, pool, "api_key", key, 0) // the server committed; its answer is held
			leave()
			time.Sleep(20 * time.Millisecond)
			answers.release()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit after its caller left: %v, want context.Canceled", err)
			}
			l.Close()
			again, err := direct.Commit(context.Background(), grant, map[string]float64{"tokens": 70})
			if err != nil {
				t.Fatalf("Commit again: %v", err)
			}
			if !again.AlreadySettled() || again.LeasesAlreadyReleased != 1 || again.Reservations[0].Status != ratelimit.StatusCommitted ||
				again.Reservations[0].Actual != 70 {
				t.Fatalf("Commit again = %+v, want a no-op reporting the first commit (70 committed)", again)
			}
			assertNothingHeld(t, pool, "api_key", key)
			assertCounter(t, pool, key, "tokens", 70, 0)
		})
	}
}

// A caller alone whose statement waits for a row lock returns at most
// leftStatementGrace after it left, and the statement, cancelled then on
// the server (pgx sends it a cancel request), is rolled back: once the
// lock goes nothing is held, and the Limiter's next call is answered.
func TestReserveCallerWhoLeavesAStatementStuckOnALock(t *testing.T) {
	t.Parallel()
	for _, tc := range callerModes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			const grace = 200 * time.Millisecond
			l := ratelimit.New(pool, append(tc.opts, ratelimit.WithLeftStatementGrace(grace))...)
			key := uniqueKey("k")
			limits, blocker := holdCounter(t, pool, key)
			leave, errs := reserveBehindLock(t, pool, l, limits)
			left := time.Now()
			leave()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			if took := time.Since(left); took < grace || took > grace+2*time.Second {
				t.Errorf("the caller returned %s after it left, want about the grace (%s)", took, grace)
			}
			pgtest.AwaitNoLockWaiters(t, pool, "the statement its caller left")
			if err := blocker.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}
			g, err := l.Reserve(context.Background(), "", "", limits)
			if err != nil {
				t.Fatalf("the next Reserve: %v", err)
			}
			if _, err := l.Release(context.Background(), g, "test"); err != nil {
				t.Fatal(err)
			}
			l.Close()
			assertNothingHeld(t, pool, "key", key)
		})
	}
}
