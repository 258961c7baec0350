package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local grant decoded from JSON settles through WithTx of the Limiter
// that admitted it, as the grant itself does there (a worker that reads
// the grant back from a task's payload and settles it in the transaction
// that finishes the task): its block charges the actual amount, and the
// admission is settled once. It used to report StatusUnknown there, the
// block charging the estimate when returned, and the grant itself could
// still settle it afterwards.
func TestLocalGrantThroughJSONSettlesInsideATransactionOfItsLimiter(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("jsontx")

	for _, commit := range []bool{true, false} {
		g := reserveLocal(t, l, hour, key, 1000, 10)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusReleased, Settled: true, Reserved: 10}
		var s ratelimit.Settlement
		if commit {
			want.Status, want.Actual = ratelimit.StatusCommitted, 3
			s, err = l.WithTx(tx).Commit(ctx, throughJSON(t, g), map[string]float64{ratelimit.MetricTokens: 3})
		} else {
			s, err = l.WithTx(tx).Release(ctx, throughJSON(t, g), "upstream failed")
		}
		if err != nil || len(s.Reservations) != 1 || s.Reservations[0] != want {
			_ = tx.Rollback(ctx)
			t.Fatalf("settle (commit %v) of the decoded grant inside WithTx = %+v, %v; want %+v", commit, s, err, want)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err = l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7}); err != nil || s.Reservations[0].Settled {
			t.Fatalf("Commit of the original after its decoded copy settled it = %+v, %v; want it settled already", s, err)
		}
	}

	l.Close()
	// 3 for the committed copy, nothing for the released one.
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 3 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used 3, reserved 0", rows)
	}
	assertBooksBalance(t, pool, "model", key)
}
