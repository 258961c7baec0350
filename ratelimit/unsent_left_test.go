package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// leaveOnNextAcquire makes cfg's pool, once a cancel is stored in the
// returned pointer, hand out its next connection with its socket closed
// under it (the statement fails unsent, pgconn.SafeToRetry) and cancel
// the caller's context in the same moment: the caller leaves between the
// failed send and the one that would follow it.
func leaveOnNextAcquire(cfg *pgxpool.Config) *atomic.Pointer[context.CancelFunc] {
	var leave atomic.Pointer[context.CancelFunc]
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		if cancel := leave.Swap(nil); cancel != nil {
			_ = c.PgConn().Conn().Close()
			(*cancel)()
		}
		return true, nil
	}
	return &leave
}

// A Reserve whose statement failed unsent, and whose caller left before
// it could be sent again, is not sent again: a request not yet sent is
// never sent once its caller has left (it would take capacity for
// nobody until its grant was released as abandoned). It used to be sent,
// granted and released "abandoned", alone or combined.
func TestReserveFailedUnsentIsNotSentAgainForACallerWhoLeft(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ratelimit.ConfigurePool(cfg)
	leave := leaveOnNextAcquire(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for name, opts := range map[string][]ratelimit.Option{
		"combined": nil,
		"alone":    {ratelimit.WithoutCombining()},
	} {
		t.Run(name, func(t *testing.T) {
			l := ratelimit.New(pool, opts...)
			key := uniqueKey("unsent-left")
			limits := hourLimits(t, pool, window("provider", key, "requests", 100, 1))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			leave.Store(&cancel)
			_, err := l.Reserve(ctx, "", "", limits)
			if leave.Load() != nil {
				t.Fatal("no connection was taken while the leave was armed: the test proves nothing")
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve = %v; want the caller's context.Canceled", err)
			}
			l.Close() // waits for any release of what was granted for nobody
			rows, err := testq.ReservationsByReason(context.Background(), pool, dbtest.ReservationsByReasonParams{ScopeType: "provider", ScopeKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 0 {
				t.Errorf("reservations written for a caller who left before its request was sent: %+v; want none", rows)
			}
			assertBooksBalance(t, pool, "provider", key)
		})
	}
}
