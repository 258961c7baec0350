package ratelimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

var (
	queries = db.New()
	testq   = dbtest.New() // test-only statements: fault injection, fixtures, summaries
)

// setup returns a Limiter on a fresh database, and the pool under it.
func setup(t *testing.T) (*ratelimit.Limiter, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t)
	return ratelimit.New(pool), pool
}

// uniqueKey returns a scope key no other test uses.
func uniqueKey(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func window(scopeType, key, metric string, limit, amount float64) ratelimit.Limit {
	return ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: key}, Metric: metric, Limit: limit, Amount: amount}
}

// hourLimits makes the first of limits a window of hourWindow's: the calls
// of a test that must meet on one counter row then do, however slowly the
// test runs. Each call picks a length of its own: calls that must meet on
// one row take the limits, or the Window, of one call.
func hourLimits(t *testing.T, pool *pgxpool.Pool, limits ...ratelimit.Limit) []ratelimit.Limit {
	t.Helper()
	limits[0].Window = hourWindow(t, pool)
	return limits
}

// hourWindow returns the length of a window, an hour or a few minutes more
// (pgtest.WindowWithRoom), whose current window has a minute left at least;
// it waits only when none of those lengths has.
func hourWindow(t *testing.T, conn db.DBTX) time.Duration {
	t.Helper()
	return pgtest.WindowWithRoom(t, conn, time.Hour, time.Minute)
}

func concurrent(scopeType, key string, limit float64) ratelimit.Limit {
	return ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: key}, Metric: ratelimit.MetricConcurrent, Limit: limit, Amount: 1}
}

// rowCounts reads how many rows each table holds.
func rowCounts(t *testing.T, conn db.DBTX) dbtest.TableRowCountsRow {
	t.Helper()
	counts, err := testq.TableRowCounts(context.Background(), conn)
	if err != nil {
		t.Fatalf("TableRowCounts: %v", err)
	}
	return counts
}

// counterRows reads every window counter of a scope, newest first.
func counterRows(t *testing.T, conn db.DBTX, scopeType, key string) []db.CounterListByScopeRow {
	t.Helper()
	rows, err := queries.CounterListByScope(context.Background(), conn, db.CounterListByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		t.Fatalf("CounterListByScope: %v", err)
	}
	return rows
}

// liveLeases reads how many live leases a scope holds.
func liveLeases(t *testing.T, conn db.DBTX, scopeType, key string) int64 {
	t.Helper()
	row, err := testq.LeaseLiveByScope(context.Background(), conn, dbtest.LeaseLiveByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		t.Fatalf("LeaseLiveByScope: %v", err)
	}
	return row.Leases
}

// assertBooksBalance checks, for every counter of the scope, that reserved
// equals the open reservations and allotments and used the committed actual
// amounts and what returned allotments charged.
func assertBooksBalance(t *testing.T, conn db.DBTX, scopeType, key string) {
	t.Helper()
	for _, c := range booksOff(t, conn, scopeType, key) {
		t.Errorf("%s:%s %s window %s: counter used=%v reserved=%v, ledger committed=%v open=%v",
			scopeType, key, c.Metric, c.WindowStart, c.UsedValue, c.ReservedValue, c.CommittedAmount, c.OpenAmount)
	}
}

// booksOff returns the counters of the scope that disagree with their
// ledger (reservations and allotments), compared in SQL: added up in Go,
// fractional amounts gave 24.800000000000004 against 24.8.
func booksOff(t *testing.T, conn db.DBTX, scopeType, key string) []dbtest.LedgerMismatchesByScopeRow {
	t.Helper()
	off, err := testq.LedgerMismatchesByScope(context.Background(), conn, dbtest.LedgerMismatchesByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		t.Fatalf("LedgerMismatchesByScope: %v", err)
	}
	return off
}

// assertSettled checks that, after every request was settled, each api_key
// scope used exactly what was committed ("key metric" -> amount, for the
// requests and tokens metrics), holds nothing reserved and balances its
// books, and that no model holds a live lease.
func assertSettled(t *testing.T, conn db.DBTX, keys, models []string, committed map[string]float64) {
	t.Helper()
	for _, key := range keys {
		used := map[string]float64{}
		for _, row := range counterRows(t, conn, "api_key", key) {
			used[row.Metric] += row.UsedValue
			if row.ReservedValue != 0 {
				t.Errorf("%s %s: reserved %v left behind", key, row.Metric, row.ReservedValue)
			}
		}
		for _, metric := range []string{"requests", "tokens"} {
			if used[metric] != committed[key+" "+metric] {
				t.Errorf("%s %s: used %v, committed %v", key, metric, used[metric], committed[key+" "+metric])
			}
		}
		assertBooksBalance(t, conn, "api_key", key)
	}
	for _, model := range models {
		if live := liveLeases(t, conn, "model", model); live != 0 {
			t.Errorf("model %s: %d live leases left", model, live)
		}
	}
}

// heldTx begins a transaction of the test's own, to take locks in as
// another session would, and rolls it back when the test ends.
func heldTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
