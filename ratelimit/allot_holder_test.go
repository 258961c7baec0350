package ratelimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Holder PostgreSQL cannot store (a NUL byte, invalid UTF-8) failed every
// block taken: Local limits were all decided in the database, one failed
// statement more per request, and nothing said why. It is recorded
// cleaned instead.
func TestLocalHolderIsRecordedAsText(t *testing.T) {
	t.Parallel()
	if got, want := recordedHolder(t, "gw\x00-1\xff"), "gw-1\uFFFD"; got != want {
		t.Fatalf("block held by %q, want %q", got, want)
	}
}

// A Holder of a megabyte was written whole to every block's row: it is
// recorded as its first MaxScopeBytes bytes, cut at a character's start.
func TestLocalHolderIsRecordedCutToMaxScopeBytes(t *testing.T) {
	t.Parallel()
	holder := strings.Repeat("€", 1<<20/3) // 3 bytes each
	want := strings.Repeat("€", ratelimit.MaxScopeBytes/3)
	if got := recordedHolder(t, holder); got != want {
		t.Fatalf("block held by %.60q (%d bytes), want %.60q (%d bytes)", got, len(got), want, len(want))
	}
}

// recordedHolder is the holder recorded on the block that a Limiter with
// AllotmentOptions{Holder: holder} takes for a Local limit's first request.
func recordedHolder(t *testing.T, holder string) string {
	t.Helper()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{Holder: holder}))
	defer l.Close()
	key := uniqueKey("holder")
	g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Reservations[0].Local {
		t.Fatalf("reservation %+v, want a Local one", g.Reservations[0])
	}
	blocks := allotments(t, pool, "model", key)
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want 1", len(blocks))
	}
	return blocks[0].Holder
}
