package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The tests' check of a scope's books compares counters and ledger in SQL:
// 0.1 committed through the database and 0.2 through a Local block's return
// balance their counter's 0.3 exactly (added up in Go, the ledger came to
// 0.30000000000000004), and a counter put off its ledger by 0.1 is found.
func TestBooksOffComparesExactly(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("books")
	plain := localWindow(hour, key, 1000, 0.1)
	plain.Local = false // the same counter, decided in the database
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{plain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, reserveLocal(t, l, hour, key, 1000, 0.2), nil); err != nil {
		t.Fatal(err)
	}
	l.Close() // returns the block, charging its 0.2
	if off := booksOff(t, pool, "model", key); len(off) != 0 {
		t.Fatalf("books off after 0.1 and 0.2 committed: %+v", off)
	}
	if _, err := testq.OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
		ScopeType: "model", ScopeKey: key, Metric: ratelimit.MetricTokens, ReservedDelta: 0.1,
	}); err != nil {
		t.Fatal(err)
	}
	if off := booksOff(t, pool, "model", key); len(off) != 1 || off[0].ReservedValue != 0.1 || off[0].UsedValue != 0.3 {
		t.Fatalf("books off after adding 0.1 to reserved: %+v; want that counter, reserved 0.1, used 0.3", off)
	}
}
