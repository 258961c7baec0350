package ratelimit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// wrappedPool is an Executor of the caller's own, as an instrumented or
// otherwise wrapped pool is: the Limiter cannot see its exec mode.
type wrappedPool struct{ p *pgxpool.Pool }

func (w wrappedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return w.p.Exec(ctx, sql, args...)
}

func (w wrappedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return w.p.Query(ctx, sql, args...)
}

func (w wrappedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.p.QueryRow(ctx, sql, args...)
}

func (w wrappedPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return w.p.SendBatch(ctx, b)
}

func (w wrappedPool) Begin(ctx context.Context) (pgx.Tx, error) { return w.p.Begin(ctx) }

// A combined batch on a hot counter succeeds on every Executor of a
// simple-protocol pool, not only on the pool itself: a connection acquired
// from it (*pgxpool.Conn) and a wrapper whose exec mode the Limiter cannot
// read. There pgx sends a batch as one multi-statement query, in which
// pgadmit_hot_commit cannot commit (2D000); the batch must go as a plain
// statement instead, admitting each request once, and its settlement too.
func TestHotBatchOnAnyExecutorOfASimpleProtocolPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cfg := pool.Config()
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("simple-protocol pool: %v", err)
	}
	t.Cleanup(simple.Close)
	c, err := simple.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer c.Release()

	for _, e := range []struct {
		name string
		conn ratelimit.Executor
	}{{"pool connection", c}, {"wrapped pool", wrappedPool{simple}}} {
		t.Run(e.name, func(t *testing.T) {
			l := ratelimit.New(e.conn, ratelimit.WithoutCombining())
			key, model := uniqueKey("simple"), uniqueKey("model")
			req := ratelimit.BatchRequest{Limits: []ratelimit.Limit{
				window("api_key", key, "tokens", 1e9, 1), concurrent("model", model, 1e9),
			}}
			for round := range 2 { // the second after the first found the mode out
				grants, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{req, req})
				if err != nil {
					t.Fatalf("round %d: ReserveCombined: %v", round, err)
				}
				for i, err := range errs {
					if err != nil {
						t.Fatalf("round %d: admission %d: %v", round, i, err)
					}
				}
				settled, err := l.CommitCombined(ctx, grants)
				if err != nil {
					t.Fatalf("round %d: CommitCombined: %v", round, err)
				}
				for i, s := range settled {
					if len(s.Reservations) != 1 || !s.Reservations[0].Settled || s.LeasesReleased != 1 {
						t.Fatalf("round %d: settlement %d: %+v, want its reservation committed and its lease released", round, i, s)
					}
				}
			}
			rows, err := testq.ReservationsByReason(ctx, pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
			if err != nil {
				t.Fatalf("ReservationsByReason: %v", err)
			}
			if len(rows) != 1 || rows[0].Status != ratelimit.StatusCommitted || rows[0].Reservations != 4 {
				t.Errorf("reservations by status: %+v, want 4 committed", rows)
			}
			if live := liveLeases(t, pool, "model", model); live != 0 {
				t.Errorf("%d live leases, want 0", live)
			}
			assertBooksBalance(t, pool, "api_key", key)
			if s := l.Stats(); s.Reserve.Hot != 0 || s.Settle.Hot != 0 {
				t.Errorf("%d reserve and %d settle statements counted as hot batches; want none", s.Reserve.Hot, s.Settle.Hot)
			}
		})
	}
}
