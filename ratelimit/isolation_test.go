package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Admission is exact only in READ COMMITTED; in any other level it refuses
// with ErrIsolation and writes nothing, rather than over-admit.
func TestAdmissionRefusesOtherIsolationLevels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	readCommitted, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(readCommitted.Close)
	repeatable := cfg.Copy()
	repeatable.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	repeatableRead, err := pgxpool.NewWithConfig(ctx, repeatable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repeatableRead.Close)

	limits := [][]ratelimit.Limit{
		{window("api_key", "k", "requests", 10, 1)},
		{concurrent("model", "m", 1)},
		{window("api_key", "k", "requests", 10, 1), concurrent("model", "m", 1)},
	}
	before := rowCounts(t, readCommitted)
	for _, ls := range limits {
		if _, err := ratelimit.New(repeatableRead).Reserve(ctx, "", "", ls); !errors.Is(err, ratelimit.ErrIsolation) {
			t.Errorf("Reserve(%d limits) with default_transaction_isolation = repeatable read: err = %v, want ErrIsolation", len(ls), err)
		}
		for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
			tx, err := readCommitted.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ratelimit.New(readCommitted).WithTx(tx).Reserve(ctx, "", "", ls); !errors.Is(err, ratelimit.ErrIsolation) {
				t.Errorf("Reserve(%d limits) in a %s transaction: err = %v, want ErrIsolation", len(ls), level, err)
			}
			_ = tx.Rollback(ctx)
		}
	}
	queued := ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "team", Key: "t"}, Metric: ratelimit.MetricQueueSize, Limit: 3},
	}}
	if _, err := ratelimit.New(repeatableRead).CreateTask(ctx, queued); !errors.Is(err, ratelimit.ErrIsolation) {
		t.Errorf("CreateTask with a queue limit under repeatable read: err = %v, want ErrIsolation", err)
	}
	after := rowCounts(t, readCommitted)
	if after.Tasks != before.Tasks || after.Admissions != before.Admissions {
		t.Errorf("refused task creation wrote rows: %+v -> %+v", before, after)
	}
	if after.Reservations != before.Reservations || after.Leases != before.Leases {
		t.Errorf("refused admissions wrote rows: %+v -> %+v", before, after)
	}
	for _, c := range counterRows(t, readCommitted, "api_key", "k") {
		if c.UsedValue != 0 || c.ReservedValue != 0 {
			t.Errorf("counter changed: %+v", c)
		}
	}
}

// A renewal that runs after an admission counted its lease as expired cannot
// revive it, even from a transaction that began before the expiry.
func TestRenewCannotReviveACountedLease(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	model := uniqueKey("model")
	slot := concurrent("model", model, 1)
	slot.LeaseTTL = time.Second
	first, err := l.Reserve(ctx, "", "", []ratelimit.Limit{slot})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx) // its now() stays before the expiry
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := testq.TableRowCounts(ctx, tx); err != nil { // start the transaction's clock
		t.Fatal(err)
	}
	waitPast(t, pool, first.Leases[0].ExpiresAt) // the first lease expired, on the database's clock
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{slot}); err != nil {
		t.Fatalf("Reserve after the first lease expired: %v", err)
	}
	renewed, err := l.WithTx(tx).RenewLeases(ctx, first.Leases)
	if !errors.Is(err, ratelimit.ErrLeaseLost) || len(renewed) != 0 {
		t.Fatalf("RenewLeases of the expired lease = %+v, %v; want ErrLeaseLost", renewed, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if live := liveLeases(t, pool, "model", model); live != 1 {
		t.Fatalf("live leases = %d, want 1 (the limit)", live)
	}
}

// Lease ids are UUIDs, whatever their case.
func TestRenewLeasesAcceptsUpperCaseIDs(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{concurrent("model", uniqueKey("model"), 1)})
	if err != nil {
		t.Fatal(err)
	}
	upper := grant.Leases[0]
	upper.ID = strings.ToUpper(upper.ID)
	renewed, err := l.RenewLeases(ctx, []ratelimit.Lease{upper})
	if err != nil || len(renewed) != 1 {
		t.Fatalf("RenewLeases(upper-case id) = %+v, %v; want it renewed", renewed, err)
	}
	if diff := cmp.Diff(upper.ID, renewed[0].ID); diff != "" {
		t.Fatalf("renewed lease id (-want +got):\n%s", diff)
	}
}
