package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// TestLocalReservationSettledInARolledBackTransactionStaysSettled pins what
// WithTx documents: a Local reservation has no row, and settles in this
// process's memory at once, so the caller's rollback does not undo its
// Commit (or Release); the grant's rows in the database do roll back. A
// settle after the rollback settles those rows and reports the Local one
// settled already (Settled false), charged as the first settle said: it
// is counted once, never twice.
func TestLocalReservationSettledInARolledBackTransactionStaysSettled(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("txlocal")
	remote := window("api_key", key, ratelimit.MetricTokens, 100, 10)
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 10), remote})
	if err != nil || !g.Reservations[0].Local || g.Reservations[1].Local {
		t.Fatalf("Reserve: %+v, %v; want one Local reservation and one row", g, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.WithTx(tx).Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 3}); err != nil ||
		!s.Reservations[0].Settled || !s.Reservations[1].Settled {
		_ = tx.Rollback(ctx)
		t.Fatalf("Commit inside the transaction = %+v, %v", s, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := l.Release(ctx, g, "upstream failed")
	want := []ratelimit.ReservationOutcome{
		{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Settled: false, Reserved: 10, Actual: 3},
		{ID: g.Reservations[1].ID, Metric: ratelimit.MetricTokens, Status: ratelimit.StatusReleased, Settled: true, Reserved: 10},
	}
	if err != nil || len(s.Reservations) != 2 || s.Reservations[0] != want[0] || s.Reservations[1] != want[1] {
		t.Fatalf("Release after the rollback = %+v, %v; want %+v", s, err, want)
	}
	l.Close()
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 3 || rows[0].ReservedValue != 0 {
		t.Fatalf("Local counter %+v; want used 3 (the rolled back Commit's), reserved 0", rows)
	}
	if rows := counterRows(t, pool, "api_key", key); len(rows) != 1 || rows[0].UsedValue != 0 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v; want the row released", rows)
	}
	assertBooksBalance(t, pool, "api_key", key)
}
