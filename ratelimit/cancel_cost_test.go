package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// freezer is a TCP proxy to a PostgreSQL server that, once frozen, stops
// passing on the server's answers and answers no new connection: the
// server's host froze mid-statement.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	// sentFrozen is told when a client sent something while frozen (a
	// statement that will get no answer).
	sentFrozen chan struct{}
	mu         sync.Mutex
	conns      []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, sentFrozen: make(chan struct{}, 1)}
	t.Cleanup(f.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.keep(c)
			if f.frozen.Load() {
				continue // accepted, never answered
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.keep(s)
			go f.statements(c, s)
			go f.answers(c, s)
		}
	}()
	return f
}

// close stops the proxy and drops its connections (the cancel requests
// pgx sends on a frozen server's connections wait for them up to 15 s).
func (f *freezer) close() {
	f.frozen.Store(false)
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *freezer) keep(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

// statements passes on what client sends to server, and tells sentFrozen
// when it came while frozen.
func (f *freezer) statements(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
			if f.frozen.Load() {
				select {
				case f.sentFrozen <- struct{}{}:
				default:
				}
			}
		}
		if err != nil {
			server.Close()
			return
		}
	}
}

// answers passes on what server sends to client, holding it while frozen.
func (f *freezer) answers(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		for f.frozen.Load() {
			time.Sleep(time.Millisecond)
		}
		if n > 0 {
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// What ConfigurePool's doc, Reserve's and httpadmit's say a cancelled
// statement costs: a caller alone, whose statement is cancelled 100 ms after
// its context ended, gets its answer about 100 ms after that from a server
// that answers the cancel (the statement waits for a row lock: the cancel
// request's round trip, then the 100 ms pause), and 1 s after it from one
// whose host froze (the cancel request is not acknowledged, and the
// connection is given up on after 1 s).
func TestReserveCancelledOnAConfiguredPoolCostsAPauseOrASecond(t *testing.T) {
	t.Parallel()
	// A loaded machine answers late, never early.
	const grace, early, late = 100 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond
	cost := map[string]time.Duration{"waiting for a lock": 100 * time.Millisecond, "server frozen": time.Second}
	for _, stuck := range []string{"waiting for a lock", "server frozen"} {
		t.Run(stuck, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			fr := newFreezer(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(fr.ln.Addr().(*net.TCPAddr).Port)
			cfg.ConnConfig.Fallbacks = nil
			ratelimit.ConfigurePool(cfg)
			p, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			l := ratelimit.New(p)
			t.Cleanup(l.Close)
			key := uniqueKey("k")
			limits := []ratelimit.Limit{window("key", key, "requests", 100, 1), concurrent("key", key, 10)}
			if err := p.Ping(context.Background()); err != nil { // a connection is open
				t.Fatal(err)
			}
			ctx, leave := context.WithCancel(context.Background())
			errs := make(chan error, 1)
			if stuck == "waiting for a lock" {
				limits, _ = holdCounter(t, pool, key)
				go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
				pgtest.AwaitLockWaiters(t, pool, "Reserve")
			} else {
				fr.frozen.Store(true)
				go func() { _, err := l.Reserve(ctx, "", "", limits); errs <- err }()
				select { // the statement is sent
				case <-fr.sentFrozen:
				case <-time.After(10 * time.Second):
					t.Fatal("Reserve sent nothing to the frozen server in 10 s")
				}
			}
			left := time.Now()
			leave()
			err = <-errs
			took := time.Since(left)
			t.Logf("Reserve returned %v after its caller left", took.Round(time.Millisecond))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Reserve after its caller left: %v, want context.Canceled", err)
			}
			if want := grace + cost[stuck]; took > want+late || took < want-early {
				t.Errorf("Reserve returned %v after its caller left, want %v (-%v, +%v)", took, want, early, late)
			}
			fr.close()
		})
	}
}
