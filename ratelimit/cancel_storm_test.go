package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// countedCancels counts the statements whose context ended while the
// server ran them (the cancel requests a pool sends) and, of their
// connections, those that gave up a statement's answer (ConfigurePool's
// handler makes pgx close a connection when the cancel is not acknowledged
// within 1 s, or the answer does not come within 250 ms after: a commit
// held up on a very loaded machine). pgx closes a connection whose answer
// came too late only after HandleUnwatchAfterCancel returned, so a
// connection counts as having given an answer up when it is closed by the
// time answersGivenUp is read (before the pools close).
type countedCancels struct {
	n     atomic.Int64
	mu    sync.Mutex
	conns map[*pgconn.PgConn]bool // connections with a statement cancelled
}

// configure wraps the context watcher handler that ConfigurePool set on cfg.
func (c *countedCancels) configure(cfg *pgxpool.Config) {
	build := cfg.ConnConfig.BuildContextWatcherHandler
	cfg.ConnConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		return countedCancel{build(conn), conn, c}
	}
}

func (c *countedCancels) cancelled() int64 { return c.n.Load() }

// answersGivenUp is how many connections with a statement cancelled are
// closed now.
func (c *countedCancels) answersGivenUp() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for conn := range c.conns {
		if conn.IsClosed() {
			n++
		}
	}
	return n
}

// countedCancel is one connection's handler, counting its cancels.
type countedCancel struct {
	ctxwatch.Handler
	conn   *pgconn.PgConn
	counts *countedCancels
}

func (h countedCancel) HandleCancel(ctx context.Context) {
	h.counts.n.Add(1)
	h.counts.mu.Lock()
	if h.counts.conns == nil {
		h.counts.conns = map[*pgconn.PgConn]bool{}
	}
	h.counts.conns[h.conn] = true
	h.counts.mu.Unlock()
	h.Handler.HandleCancel(ctx)
}

// Callers who leave at random moments, on four gateway instances whose
// pools are set up with ConfigurePool and whose Limiters cancel a
// statement 5-20 ms after its callers left (one instance sends each call
// alone, WithoutCombining; the others send a batch on the hot counter as a
// hot batch, committed by a procedure): some leave before their Reserve is sent, some
// while it waits behind a row lock that a transaction holds now and then
// (their statements are cancelled on the server, the case ConfigurePool is
// for), some after the server decided. Every Reserve must be admitted,
// refused or answered with its context's error, and at the end the books
// are exact: each counter used what the callers committed and nothing
// else, nothing is reserved, no reservation is open and no lease live, the
// doctor finds them balanced, and every pool still answers.
func TestCallersLeavingAtRandomOnConfiguredPools(t *testing.T) {
	t.Parallel()
	base := pgtest.NewPool(t)
	var cancels countedCancels
	pools := make([]*pgxpool.Pool, gatewayInstances)
	ls := make([]*ratelimit.Limiter, gatewayInstances)
	for i := range pools {
		pools[i], _ = slowDials(t, base, 0, func(cfg *pgxpool.Config) {
			ratelimit.ConfigurePool(cfg)
			cancels.configure(cfg)
		})
		opts := []ratelimit.Option{ratelimit.WithLeftStatementGrace(time.Duration(5+5*i) * time.Millisecond)}
		if i == len(pools)-1 {
			opts = append(opts, ratelimit.WithoutCombining())
		}
		ls[i] = ratelimit.New(pools[i], opts...)
	}

	// Every window is an hour's (or a few minutes more), with a minute of
	// it left at least: no window ends during the run, and each counter has
	// one row.
	hour := hourWindow(t, base)
	hourly := func(l ratelimit.Limit) ratelimit.Limit { l.Window = hour; return l }
	hot := hourly(window("provider", uniqueKey("hot"), "tokens", 9000, 100)) // every batch's
	keys := []string{uniqueKey("key"), uniqueKey("key"), uniqueKey("key")}
	model := uniqueKey("model")
	slots := concurrent("model", model, 12)
	scopes := [][2]string{{"provider", hot.Scope.Key}, {"model", model}}
	for _, key := range keys {
		scopes = append(scopes, [2]string{"api_key", key})
	}

	var mu sync.Mutex
	committed := map[string]float64{}                     // "type:key metric" -> actual amounts committed
	var reservationsCommitted, reservationsReleased int64 // by the callers
	var admitted, refused, left atomic.Int64
	refusedBy := map[string]int{}

	stop := make(chan struct{})
	var blocks atomic.Int64
	blockerDone := make(chan error, 1)
	go func() { // holds the hot counter's row now and then, as a caller's transaction would
		rng := rand.New(rand.NewPCG(99, 1))
		hold := hot
		hold.Limit, hold.Amount = 1e12, 1 // always fits: the row is locked whatever the window holds
		for {
			select {
			case <-stop:
				blockerDone <- nil
				return
			case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
			}
			tx, err := base.Begin(context.Background())
			if err != nil {
				blockerDone <- err
				return
			}
			if _, err := ratelimit.New(base).WithTx(tx).Reserve(context.Background(), "", "", []ratelimit.Limit{hold}); err != nil {
				_ = tx.Rollback(context.Background())
				blockerDone <- fmt.Errorf("the lock holder's Reserve: %w", err)
				return
			}
			time.Sleep(time.Duration(20+rng.IntN(81)) * time.Millisecond)
			if err := tx.Rollback(context.Background()); err != nil {
				blockerDone <- err
				return
			}
			blocks.Add(1)
		}
	}()

	started := time.Now()
	hammer(t, ls, func(l *ratelimit.Limiter, worker int) error {
		rng := rand.New(rand.NewPCG(uint64(worker), 23))
		for range 30 {
			key := keys[rng.IntN(len(keys))]
			perKey := hourly(window("api_key", key, "requests", 100, 1))
			var limits []ratelimit.Limit
			switch rng.IntN(4) {
			case 0:
				limits = []ratelimit.Limit{hot}
			case 1:
				limits = []ratelimit.Limit{hot, perKey}
			case 2:
				limits = []ratelimit.Limit{hot, perKey, slots}
			default:
				limits = []ratelimit.Limit{perKey, slots}
			}
			rng.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })

			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			switch n := rng.IntN(20); {
			case n < 6: // leaves at once: often before the request is sent
				ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
			case n < 17: // leaves while the statement runs or waits for the lock
				ctx, cancel = context.WithTimeout(ctx, time.Duration(5+rng.IntN(200))*time.Millisecond)
			}
			grant, err := l.Reserve(ctx, "", "", limits)
			ended := ctx.Err() != nil
			cancel()
			var exceeded *ratelimit.ExceededError
			switch {
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
				if !ended {
					return fmt.Errorf("Reserve returned %w, its context never ended", err)
				}
				left.Add(1)
				continue
			case errors.As(err, &exceeded) && errors.Is(err, ratelimit.ErrExceeded):
				refused.Add(1)
				mu.Lock()
				refusedBy[exceeded.ScopeType]++
				mu.Unlock()
				continue
			case err != nil:
				return fmt.Errorf("Reserve: %w", err)
			}
			admitted.Add(1)
			status := ratelimit.StatusCommitted
			var s ratelimit.Settlement
			if rng.IntN(4) == 0 {
				status = ratelimit.StatusReleased
				s, err = l.Release(context.Background(), grant, "client_cancelled")
			} else {
				s, err = l.Commit(context.Background(), grant, map[string]float64{"tokens": float64(rng.IntN(101))})
			}
			if err != nil {
				return fmt.Errorf("settling a grant: %w", err)
			}
			if len(s.Reservations) != len(grant.Reservations) || s.LeasesReleased != len(grant.Leases) {
				return fmt.Errorf("settlement %+v of grant %+v: not everything settled", s, grant)
			}
			mu.Lock()
			for i, r := range s.Reservations {
				if !r.Settled || r.Status != status {
					mu.Unlock()
					return fmt.Errorf("reservation %d of grant %+v: %+v, want settled %s by this call", i, grant, r, status)
				}
				if status == ratelimit.StatusReleased {
					reservationsReleased++
					continue
				}
				g := grant.Reservations[i]
				committed[g.ScopeType+":"+g.ScopeKey+" "+g.Metric] += r.Actual
				reservationsCommitted++
			}
			mu.Unlock()
		}
		return nil
	})
	close(stop)
	if err := <-blockerDone; err != nil {
		t.Error(err)
	}
	for _, l := range ls {
		l.Close()
	}
	answersLost := cancels.answersGivenUp() // the pools are still open
	s := summary(t, base)
	abandoned := s.ReservationsReleased - reservationsReleased // granted to callers who had left, and given back
	t.Logf("%s: %d admitted, %d refused %v, %d left (%d reservations granted to them given back); "+
		"%d statements cancelled on the server (%d answers given up), the hot row locked %d times",
		time.Since(started).Round(time.Millisecond), admitted.Load(), refused.Load(), refusedBy, left.Load(), abandoned,
		cancels.cancelled(), answersLost, blocks.Load())
	if admitted.Load() == 0 || refused.Load() == 0 || left.Load() == 0 || cancels.cancelled() == 0 {
		t.Errorf("the run should see admissions, refusals, callers who left and statements cancelled on the server")
	}

	for _, scope := range scopes {
		used := map[string]float64{}
		for _, row := range counterRows(t, base, scope[0], scope[1]) {
			used[row.Metric] += row.UsedValue
		}
		for _, metric := range []string{"tokens", "requests"} {
			if want := committed[scope[0]+":"+scope[1]+" "+metric]; used[metric] != want {
				t.Errorf("%s:%s %s: used %v, the callers committed %v", scope[0], scope[1], metric, used[metric], want)
			}
		}
		if answersLost == 0 {
			assertNothingHeld(t, base, scope[0], scope[1])
		}
	}
	if s.ReservationsCommitted != reservationsCommitted || abandoned < 0 {
		t.Errorf("state left behind: %+v; want %d reservations committed and at least %d released",
			s, reservationsCommitted, reservationsReleased)
	}
	// A statement whose answer a connection gave up on may have committed:
	// what it granted lapses with its window or lease TTL, as ConfigurePool
	// documents. Only then may anything be held.
	if held := s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0; held && answersLost == 0 {
		t.Errorf("state left behind: %+v; want no open reservation or lease and nothing reserved", s)
	} else if held {
		t.Logf("held after %d answers given up (lapsing with their windows): %+v", answersLost, s)
	}
	assertDoctorOK(t, base)
	for i, p := range pools {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := p.Ping(ctx); err != nil {
			t.Errorf("pool %d no longer answers: %v", i, err)
		}
		cancel()
	}
}
