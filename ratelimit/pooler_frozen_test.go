package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// frozenPoolerEnd bounds how long CheckPooler on a server that stopped answering takes to end
// once its context did: the statement in flight gives up (with ConfigurePool's handling, after
// its cancel request went unanswered for a second), and no clean-up waits for an answer.
const frozenPoolerEnd = 2 * time.Second

// The pool configurations the frozen CheckPooler tests run on: pgx's handling of a context's
// end (the connection's deadline) and ConfigurePool's (a cancel request first).
var frozenPoolerSetups = []struct {
	name      string
	configure func(*pgxpool.Config)
}{{"pgx's context handling", nil}, {"ConfigurePool", ratelimit.ConfigurePool}}

// CheckPooler ends when its context ends, on a server that stopped answering while the probe held
// a transaction open (frozen as the prober runs its statement the second time), with
// ctx's error. Its clean-ups (the holder's rollback, the prober's deallocation) waited for the
// server's answer with no bound, so that neither a deadline nor a cancel ended it.
func TestCheckPoolerOnAFrozenServerEndsWithItsContext(t *testing.T) {
	t.Parallel()
	for _, s := range frozenPoolerSetups {
		for _, deadline := range []bool{true, false} {
			name := s.name + ", cancelled"
			if deadline {
				name = s.name + ", deadline"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fr, pool := poolFrozenInPoolerProbe(t, s.configure)
				// The deadline passes before the prober's own 2 s wait for its second statement
				// (which starts after the freeze) runs out.
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				if !deadline {
					ctx, cancel = context.WithCancel(context.Background())
				}
				defer cancel()
				errs := checkPoolerUntilFrozen(t, ctx, fr, pool)
				if !deadline {
					cancel()
				}
				ended, _ := ctx.Deadline()
				if !deadline {
					ended = time.Now()
				}
				select {
				case err := <-errs:
					took := time.Since(ended)
					t.Logf("CheckPooler ended %s after its context: %v", took.Round(time.Millisecond), err)
					if !errors.Is(err, ctx.Err()) {
						t.Errorf("CheckPooler on a frozen server = %v, want an error matching %v", err, ctx.Err())
					}
				case <-time.After(time.Until(ended) + frozenPoolerEnd):
					t.Errorf("CheckPooler on a frozen server: not ended %s after its context", frozenPoolerEnd)
				}
			})
		}
	}
}

// On a direct connection (no pooler between it and the server) whose second statement got no
// answer within the prober's 2 s, CheckPooler fails, saying so: nothing made it wait for a server
// session, so the server stopped answering. It used to take that for a probe that saw one session,
// and probe on (its rollback then waited for ever), as if a frozen server told something of a
// pooler.
func TestCheckPoolerOnAFrozenDirectConnectionFails(t *testing.T) {
	t.Parallel()
	for _, s := range frozenPoolerSetups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fr, pool := poolFrozenInPoolerProbe(t, s.configure)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := checkPoolerUntilFrozen(t, ctx, fr, pool)
			frozen := time.Now()
			select {
			case err := <-errs:
				t.Logf("CheckPooler ended %s after the freeze: %v", time.Since(frozen).Round(time.Millisecond), err)
				if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ratelimit.ErrPoolerUnknown) ||
					errors.Is(err, ratelimit.ErrPoolerMismatch) || !strings.Contains(err.Error(), "no answer") {
					t.Errorf("CheckPooler on a frozen direct connection = %v, want an error saying the server gave no answer", err)
				}
			case <-time.After(2*time.Second + frozenPoolerEnd):
				t.Errorf("CheckPooler on a frozen direct connection: not ended %s after the freeze", 2*time.Second+frozenPoolerEnd)
			}
		})
	}
}

// poolFrozenInPoolerProbe opens a pool (set up by configure) through a freezer that freezes as
// CheckPooler's prober runs its statement the second time in its first probe, while the holder's
// transaction is open.
func poolFrozenInPoolerProbe(t *testing.T, configure func(*pgxpool.Config)) (*freezer.Freezer, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	fr, pool := freezer.NewPool(t, cfg, configure)
	fr.FreezeAt(probeText, checkSends+probeSends)
	return fr, pool
}

// probeText is in the statement whose server session CheckPooler follows (PoolerBackendPid),
// which a check of a pool in cache_statement mode on a direct connection, or behind a pooler
// that keeps prepared statements under their own names (PgBouncer 1.18), sends checkSends times
// in its transaction of two statements (the two, and a preparation of it by name, deallocated
// there) and probeSends times in each probe: the prober's statement, the holder's, and the
// prober's again.
const (
	probeText  = "pg_backend_pid"
	checkSends = 3
	probeSends = 3
)

// checkPoolerUntilFrozen starts CheckPooler(ctx, pool) and returns, once fr froze, the channel
// that its error comes on.
func checkPoolerUntilFrozen(t *testing.T, ctx context.Context, fr *freezer.Freezer, pool *pgxpool.Pool) <-chan error {
	t.Helper()
	errs := make(chan error, 1)
	go func() { errs <- ratelimit.CheckPooler(ctx, pool) }()
	select {
	case <-fr.SentFrozen():
	case err := <-errs:
		t.Fatalf("CheckPooler ended before its probe froze: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("CheckPooler never ran its probe's statement twice")
	}
	return errs
}

// Through a proxy that gave the probe's connection no server session for its second statement
// while the check's other connection held a transaction open (a proxy with none to spare queues
// it; here a freezer in front of a PgBouncer holds its answer past the prober's 2 s, then lets
// it go), CheckPooler could not tell, and its error says what the probes saw: it used to say of
// every probe that the connection kept its server session and no other connection was given
// it, also of those whose statement never ran. Probes that did keep their session (the freezer
// let them be) are still said to have.
func TestCheckPoolerSaysWhichProbesWaitedForASession(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		waited int
		says   []string
	}{
		{2, []string{
			"in 5 probes through a proxy", "in 3 the connection kept its server session and no other connection was given it",
			"in 2 its second statement got no server session within 2s while the check's other connection held a transaction open",
		}},
		{5, []string{
			"in 5 probes through a proxy", "the connection's second statement got no server session within 2s while the check's " +
				"other connection held a transaction open",
		}},
	} {
		t.Run(fmt.Sprintf("%d of 5 waited", c.waited), func(t *testing.T) {
			t.Parallel()
			err := checkPoolerQueued(t, c.waited)
			t.Logf("CheckPooler: %v", err)
			if !errors.Is(err, ratelimit.ErrPoolerUnknown) || errors.Is(err, ratelimit.ErrPoolerMismatch) {
				t.Fatalf("CheckPooler through a proxy that queued %d probes = %v, want ErrPoolerUnknown", c.waited, err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("CheckPooler through a proxy that queued %d probes = %v\nwant it to say %q", c.waited, err, s)
				}
			}
			if c.waited == 5 && strings.Contains(err.Error(), "kept its server session") {
				t.Errorf("CheckPooler through a proxy that queued every probe says a connection kept its session: %v", err)
			}
		})
	}
}

// checkPoolerQueued runs CheckPooler (cache_statement) through a freezer in front of a PgBouncer
// in session mode (each client connection keeps its server session), whose answer to the prober's
// second statement the freezer holds in the first waited probes, until the prober gave up (its
// 2 s) and the holder sent its rollback (answered within 5 s), and returns its error. It used to
// hold it a fixed 3 s.
func checkPoolerQueued(t *testing.T, waited int) error {
	t.Helper()
	// A server connection for the holder, one for each prober given up on (pgx's cancel request
	// for it, which the freezer leaves unanswered while frozen, keeps its client connection, and
	// so in session mode its server connection, up to 15 s), and one for the next prober.
	pooled, _ := pgtest.NewPoolerURLIn(t, "session", waited+2)
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatal(err)
	}
	// Not so the pool's connections: CheckPooler takes one given up on out of the pool at once
	// (TestCheckPoolerGivesTheProbeConnectionBackWhenItGivesUp). It stayed acquired while it
	// closed, up to those 15 s, and a pool of two left the third probe none once the two before
	// it were given up on within 15 s: it failed with "no connection of the pool came free within
	// 5s", or waited most of that.
	cfg.MaxConns = 2
	fr, pool := freezer.NewPool(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fr.FreezeAt(probeText, checkSends+probeSends)
	errs := make(chan error, 1)
	go func() { errs <- ratelimit.CheckPooler(ctx, pool) }()
	for i := range waited {
		select {
		case <-fr.SentFrozen():
		case err := <-errs:
			t.Fatalf("CheckPooler ended before its probe %d froze: %v", i+1, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("CheckPooler never ran its probe %d's statement twice", i+1)
		}
		// The prober gives up after its 2 s, and the holder then rolls its transaction back:
		// the answer is held until then, not a fixed 3 s, and let go within the holder's 5 s.
		rolledBack := fr.Watch("rollback")
		select {
		case <-rolledBack.Sent():
		case err := <-errs:
			t.Fatalf("CheckPooler ended before its probe %d's holder rolled back: %v", i+1, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("the holder of CheckPooler's probe %d never rolled back: its prober never gave up on its frozen statement", i+1)
		}
		if i+1 < waited {
			fr.FreezeAt(probeText, probeSends)
		}
		select { // the holder's rollback, sent while frozen, told it too
		case <-fr.SentFrozen():
		default:
		}
		fr.Unfreeze()
	}
	select {
	case err := <-errs:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("CheckPooler did not end 30s after its last queued probe")
		return nil
	}
}
