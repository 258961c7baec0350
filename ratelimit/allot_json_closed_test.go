package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A block that admits no more (spent, or its window ended) waits for the
// requests still in flight, until its window is over when one never
// settles (its copy settled on another Limiter, say). Meanwhile it keeps
// only those in flight for settling copies of their grants: the settled
// ones, whether they settled before it closed or after, are let go. It
// used to keep each until the block was returned, so one request left in
// flight per block kept every request of the window in memory.
func TestClosedBlockKeepsOnlyItsAdmissionsInFlight(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	const most, blocks = 3, 8
	l := ratelimit.New(pool, ratelimit.WithBlockAdmissions(most),
		ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(l.Close)
	ctx := context.Background()
	key := uniqueKey("jsonclosed")
	commit := func(g ratelimit.Grant) {
		t.Helper()
		if s, err := l.Commit(ctx, throughJSON(t, g), nil); err != nil || !s.Reservations[0].Settled {
			t.Fatalf("Commit of a decoded grant = %+v, %v; want it settled", s, err)
		}
	}
	blockOf := map[string]int{} // Allotment -> its place
	var pinned, later []ratelimit.Grant
	admitted := 0
	for len(blockOf) <= blocks {
		g := reserveLocal(t, l, hour, key, 1000, 1)
		admitted++
		id := g.Reservations[0].Allotment
		n, seen := blockOf[id]
		if !seen {
			n = len(blockOf)
			blockOf[id] = n
			pinned = append(pinned, g) // the first of each block stays in flight
			continue
		}
		if n%2 == 0 {
			commit(g) // settled while its block still admits
		} else {
			later = append(later, g) // settled once its block admits no more
		}
	}
	for _, g := range later {
		commit(g)
	}
	// In flight: one per block. Settled and kept: at most those of the two
	// blocks still admitting (current and next).
	if n, want := l.LocalAdmissionsKept(), len(pinned)+2*most; n > want {
		t.Fatalf("admissions kept = %d with %d in flight, want at most %d", n, len(pinned), want)
	}
	for _, g := range pinned {
		commit(g)
	}
	l.Close()
	// Each committed at its estimate, 1, wherever it was kept.
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != float64(admitted) || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used %d, reserved 0", rows, admitted)
	}
	assertBooksBalance(t, pool, "model", key)
}
