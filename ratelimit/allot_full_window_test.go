package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Once a block asked for finds its window full, the Local requests that
// come after it are decided in the database without asking for another
// block each (one more statement per request, locking the counter row,
// just when the window refuses): 200 refusals of a full window of 100 asked
// for 200 blocks. They are still decided exactly: room given back comes
// back to requests.
func TestLocalFullWindowAsksForNoBlockPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, takes, hour := blockCountingLimiter(t)
	key := uniqueKey("full")
	plain := localWindow(hour, key, 100, 1)
	plain.Local = false // the same counter, decided in the database
	held, err := l.Reserve(ctx, "", "", []ratelimit.Limit{plain})
	if err != nil {
		t.Fatal(err)
	}
	grants := []ratelimit.Grant{held}
	for {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 100, 1)})
		if errors.Is(err, ratelimit.ErrExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	if len(grants) != 100 {
		t.Fatalf("admitted %d of a window of 100", len(grants))
	}
	before := takes.n.Load()
	for range 200 {
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 100, 1)}); !errors.Is(err, ratelimit.ErrExceeded) {
			t.Fatalf("Reserve on a full window: %v, want a refusal", err)
		}
	}
	if n := takes.n.Load() - before; n > 1 {
		t.Errorf("200 refusals of a full window asked for %d blocks, want 1 at most", n)
	}
	// 99 Local admissions, the refusal that ended the loop and the 200: the
	// refusals all decided in the database, as blocks only admit.
	if s := l.Stats().Local; s.NoRoom < 1 || s.Failed != 0 || s.NoRoom+s.Granted != takes.n.Load() || s.FromBlocks+s.InDatabase != 300 || s.InDatabase < 201 {
		t.Errorf("Stats().Local = %+v for %d block requests, want every one counted, some with no room, none failed; and 300 Local limits, at least the 201 refused decided in the database", s, takes.n.Load())
	}

	// A grant the database holds, given back, makes room, which the next
	// request gets from the database.
	if _, err := l.Release(ctx, held, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 100, 1)}); err != nil {
		t.Errorf("Reserve after a release: %v, want it admitted", err)
	}
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 100, 1)}); !errors.Is(err, ratelimit.ErrExceeded) {
		t.Errorf("Reserve past the limit again: %v, want a refusal", err)
	}
}
