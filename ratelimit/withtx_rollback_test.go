package ratelimit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// txSnapshot is every row a WithTx operation on the test's scopes and task
// may write.
type txSnapshot struct {
	counts   dbtest.TableRowCountsRow
	counters []any
	ledger   []any
	leases   []dbtest.LeaseRowsByScopeRow
	state    dbtest.OpsStateSummaryRow
}

func takeTxSnapshot(t *testing.T, pool *pgxpool.Pool, window, slots ratelimit.Scope) txSnapshot {
	t.Helper()
	ctx := context.Background()
	s := txSnapshot{counts: rowCounts(t, pool), state: summary(t, pool)}
	for _, r := range counterRows(t, pool, window.Type, window.Key) {
		s.counters = append(s.counters, r)
	}
	ledger, err := testq.ReservationsByReason(ctx, pool, dbtest.ReservationsByReasonParams{ScopeType: window.Type, ScopeKey: window.Key})
	if err != nil {
		t.Fatalf("ReservationsByReason: %v", err)
	}
	for _, r := range ledger {
		s.ledger = append(s.ledger, r)
	}
	if s.leases, err = testq.LeaseRowsByScope(ctx, pool, dbtest.LeaseRowsByScopeParams{ScopeType: slots.Type, ScopeKey: slots.Key}); err != nil {
		t.Fatalf("LeaseRowsByScope: %v", err)
	}
	return s
}

// TestWithTxRolledBackLeavesNoTrace: every operation on a grant inside a
// caller's transaction (Reserve, RenewLeases, Attach, Commit, Release,
// ReleaseLeases) that the caller rolls back leaves every counter, ledger
// row, lease and task row as it found them; the grant is then settled
// outside exactly once, as if the transaction had never been; and one
// committed does what it does outside.
func TestWithTxRolledBackLeavesNoTrace(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	hour := hourWindow(t, pool) // an hour or a few minutes more, with a minute left
	ctx := context.Background()
	key := uniqueKey("tx")
	apiKey, model := ratelimit.Scope{Type: "api_key", Key: key}, ratelimit.Scope{Type: "model", Key: key}
	requests := window("api_key", key, ratelimit.MetricRequests, 2, 1)
	requests.Window = hour
	tokens := window("api_key", key, ratelimit.MetricTokens, 100, 10)
	tokens.Window = hour
	slots := concurrent("model", key, 1.5)
	slots.LeaseTTL = time.Minute
	limits := []ratelimit.Limit{requests, tokens, slots}
	task := startSync(t, l, time.Minute)

	inTx := func(what string, op func(tl *ratelimit.Limiter) error) {
		t.Helper()
		before := takeTxSnapshot(t, pool, apiKey, model)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := op(l.WithTx(tx)); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s inside the transaction: %v", what, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if after := takeTxSnapshot(t, pool, apiKey, model); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s rolled back changed the tables:\nbefore %+v\nafter  %+v", what, before, after)
		}
	}

	inTx("Reserve", func(tl *ratelimit.Limiter) error {
		_, err := tl.Reserve(ctx, "", "", limits)
		return err
	})
	g, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve outside: %v", err)
	}
	inTx("Reserve of a full scope", func(tl *ratelimit.Limiter) error {
		_, err := tl.Reserve(ctx, "", "", limits)
		if !errorsIsExceeded(err) {
			t.Errorf("Reserve of a full scope in the transaction: %v, want ErrExceeded", err)
		}
		return nil
	})
	inTx("RenewLeases", func(tl *ratelimit.Limiter) error {
		long := g.Leases[0]
		long.TTL = time.Hour
		_, err := tl.RenewLeases(ctx, []ratelimit.Lease{long})
		return err
	})
	inTx("Attach", func(tl *ratelimit.Limiter) error {
		_, err := tl.Attach(ctx, task.AttemptID, g)
		return err
	})
	inTx("Commit", func(tl *ratelimit.Limiter) error {
		s, err := tl.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7})
		if err == nil && (s.LeasesReleased != 1 || !s.Reservations[0].Settled || !s.Reservations[1].Settled) {
			t.Errorf("Commit inside the transaction: %+v", s)
		}
		return err
	})
	inTx("Release", func(tl *ratelimit.Limiter) error {
		_, err := tl.Release(ctx, g, "test")
		return err
	})
	inTx("ReleaseLeases", func(tl *ratelimit.Limiter) error {
		n, err := tl.ReleaseLeases(ctx, g.Leases, "test")
		if err == nil && n != 1 {
			t.Errorf("ReleaseLeases inside the transaction released %d", n)
		}
		return err
	})
	inTx("Attach then ReleaseLeases, and a Commit refused", func(tl *ratelimit.Limiter) error {
		attached, err := tl.Attach(ctx, task.AttemptID, g)
		if err != nil {
			return err
		}
		if n, err := tl.ReleaseLeases(ctx, attached.Leases, "test"); err != nil || n != 1 {
			t.Errorf("ReleaseLeases after Attach in the transaction = %d, %v", n, err)
		}
		var order *ratelimit.LockOrderError
		if _, err := tl.Commit(ctx, attached, nil); !errors.As(err, &order) || order.Op != "Commit" || order.Previous != "ReleaseLeases" {
			t.Errorf("Commit after Attach in the transaction: %v, want a *LockOrderError", err)
		}
		return nil
	})

	// The grant is as Reserve left it: settled once, outside.
	s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 7})
	if err != nil || s.LeasesReleased != 1 || s.LeasesAlreadyReleased != 0 || !s.Reservations[0].Settled || !s.Reservations[1].Settled ||
		s.Reservations[1].Actual != 7 {
		t.Fatalf("Commit outside after the rolled back ones = %+v, %v; want everything settled by it", s, err)
	}
	var used []float64
	for _, r := range counterRows(t, pool, "api_key", key) {
		if r.ReservedValue != 0 {
			t.Fatalf("counter %+v still holds a reservation", r)
		}
		used = append(used, r.UsedValue)
	}
	if len(used) != 2 || used[0]+used[1] != 8 {
		t.Fatalf("used %v; want 1 request and 7 tokens", used)
	}
	assertSlots(t, pool, key, 0, 0)
	assertBooksBalance(t, pool, "api_key", key)

	// Committed, the transaction does what the operation does outside.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := l.WithTx(tx).Reserve(ctx, "", "", limits)
	if err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("Reserve in a transaction: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	assertSlots(t, pool, key, 1, 1)
	if _, err := l.Reserve(ctx, "", "", limits); !errorsIsExceeded(err) {
		t.Fatalf("Reserve beside the committed one: %v, want ErrExceeded (2 requests, 1.5 slots)", err)
	}
	if s, err := l.Release(ctx, g2, "test"); err != nil || s.LeasesReleased != 1 {
		t.Fatalf("Release of the grant the transaction committed = %+v, %v", s, err)
	}
	assertSlots(t, pool, key, 0, 0)
	assertBooksBalance(t, pool, "api_key", key)
}

func errorsIsExceeded(err error) bool { return errors.Is(err, ratelimit.ErrExceeded) }
