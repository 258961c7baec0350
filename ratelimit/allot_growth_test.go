package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter runs for months while keys come and go: the per-counter state
// of Local limits (a blockSet) of a counter nothing is admitted on any
// more, once its blocks went back, is dropped, so that memory (and the
// housekeeping's round over every counter, ten times a second) stays
// bounded by the counters in use. It used to keep one per counter ever
// used, for the life of the process. A key that comes back gets its
// blocks again.
func TestAllotDropsIdleCounters(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiterIdleAfter(t, 20*time.Millisecond)
	ctx := context.Background()
	const n = 40
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uniqueKey(fmt.Sprintf("gone%d", i))
		g := reserveLocal(t, l, hour, keys[i], 1000, 1)
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	awaitAllotmentSets(t, l, 0, 5*time.Second)
	for _, k := range keys {
		if open := openBlocks(t, pool, k); len(open) != 0 {
			t.Errorf("key %s: %d blocks still open once its counter was dropped", k, len(open))
		}
	}
	// A key that comes back is admitted from a block again.
	g := reserveLocal(t, l, hour, keys[0], 1000, 1)
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	assertBooksBalanceAfterIdle(t, pool, l, keys[0])
}

// awaitAllotmentSets waits until l keeps the state of want counters, at
// most d.
func awaitAllotmentSets(t *testing.T, l *ratelimit.Limiter, want int, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); l.AllotmentSets() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("counters kept = %d after %v, want %d", l.AllotmentSets(), d, want)
		}
	}
}

// assertBooksBalanceAfterIdle waits for key's counter to be dropped (its
// block returned), then checks its books.
func assertBooksBalanceAfterIdle(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, key string) {
	t.Helper()
	awaitAllotmentSets(t, l, 0, 5*time.Second)
	assertBooksBalance(t, pool, "model", key)
}
