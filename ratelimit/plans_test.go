package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// fixtureRows is how many rows FixtureFill puts in each table: enough that
// the planner prefers an index wherever one serves the statement.
const fixtureRows = 10_000

// Every hot-path flow reads the tables through indexes, never a sequential
// scan, on tables of realistic size. Each flow runs in a transaction whose
// own scan counters (pg_stat_xact_*) are read before it rolls back.
func TestHotPathsUseIndexes(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	if err := queries.FixtureFill(ctx, pool, fixtureRows); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	if err := queries.TablesAnalyze(ctx, pool); err != nil {
		t.Fatalf("TablesAnalyze: %v", err)
	}
	counts := rowCounts(t, pool)
	if counts.Counters < fixtureRows || counts.Reservations < fixtureRows || counts.Leases < fixtureRows || counts.Tasks < fixtureRows {
		t.Fatalf("fixture too small: %+v", counts)
	}

	limits := []ratelimit.Limit{
		window("fixture_key", "k7", "tokens", 1e9, 500),
		window("fixture_key", "k8", "requests", 1e9, 1),
		concurrent("fixture_model", "m3", 1e6),
	}
	held, err := l.Reserve(ctx, "", "", limits) // settled by the flows below, each in a rolled-back tx
	if err != nil {
		t.Fatal(err)
	}
	flows := map[string]func(tx *ratelimit.Limiter) error{
		"Reserve": func(l *ratelimit.Limiter) error { _, err := l.Reserve(ctx, "", "", limits); return err },
		"Check":   func(l *ratelimit.Limiter) error { return l.Check(ctx, limits) },
		"Commit": func(l *ratelimit.Limiter) error {
			_, err := l.Commit(ctx, held, map[string]float64{"tokens": 420})
			return err
		},
		"Release":       func(l *ratelimit.Limiter) error { _, err := l.Release(ctx, held, "test"); return err },
		"RenewLeases":   func(l *ratelimit.Limiter) error { _, err := l.RenewLeases(ctx, held.Leases); return err },
		"ReleaseLeases": func(l *ratelimit.Limiter) error { _, err := l.ReleaseLeases(ctx, held.Leases, "test"); return err },
	}
	for name, flow := range flows {
		scans := scansOf(t, pool, func(tx pgx.Tx) error { return flow(l.WithTx(tx)) })
		for _, s := range scans {
			if s.SeqScans > 0 {
				t.Errorf("%s: %d sequential scan(s) of %s", name, s.SeqScans, s.TableName)
			}
		}
		t.Logf("%s: %+v", name, scans)
	}
}

// scansOf runs fn in a transaction that it rolls back, and returns how fn
// read each table.
func scansOf(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) []scanCount {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The counters also hold what earlier transactions of this connection
	// have not flushed yet; none are flushed inside a transaction, so the
	// difference is fn's own.
	before, err := queries.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatalf("TableScansInTransaction: %v", err)
	}
	if err := fn(tx); err != nil {
		t.Fatalf("flow: %v", err)
	}
	after, err := queries.TableScansInTransaction(ctx, tx)
	if err != nil {
		t.Fatalf("TableScansInTransaction: %v", err)
	}
	out := make([]scanCount, 0, len(after))
	for i, r := range after {
		c := scanCount{r.TableName, r.SeqScans - before[i].SeqScans, r.IndexScans - before[i].IndexScans}
		if c.SeqScans > 0 || c.IndexScans > 0 {
			out = append(out, c)
		}
	}
	return out
}

type scanCount struct {
	TableName  string
	SeqScans   int64
	IndexScans int64
}
