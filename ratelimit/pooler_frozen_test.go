package ratelimit_test

import (
	"context"
	"errors"
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
// a transaction open (frozen as the prober runs its prepared statement the second time), with
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
// CheckPooler's prober runs its prepared statement the second time (its name's third sending,
// after its preparation and first run), while the holder's transaction is open.
func poolFrozenInPoolerProbe(t *testing.T, configure func(*pgxpool.Config)) (*freezer.Freezer, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	fr, pool := freezer.NewPool(t, cfg, configure)
	fr.FreezeAt("pgadmit_pooler_probe_", 3)
	return fr, pool
}

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
		t.Fatal("CheckPooler never ran its probe's prepared statement twice")
	}
	return errs
}
