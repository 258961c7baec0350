package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A cancel that lands while a hot batch commits leaves nothing held that
// its callers do not know of. The server defers such a cancel past the
// commit, so the statement fails once the batch's grants are written; the
// Limiter has their ids from the batch's rows, releases them ("unconfirmed")
// and tells the callers the batch failed. Rounds of two admissions on one
// key (a hot batch, with a concurrency slot every other round) each get one
// cancel at a random moment, until a cancel has landed in a commit (a
// reservation released as unconfirmed), something is held that no grant
// returned names, or 60 s have passed. Then the open
// reservations and live leases are exactly those of the grants returned,
// and the books balance.
func TestHotBatchCancelledInItsCommitHoldsNothingUnknown(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer c.Release()
	l := ratelimit.New(c.Conn(), ratelimit.WithoutCombining())
	cancelHotCommits(t, pool, l, int32(c.Conn().PgConn().PID()), func() {})
}

// The same on a pool, where the release of a hot batch's unconfirmed
// grants runs in the background (its callers are told at once): Close
// waits for it, so that once Close returns nothing is held that no grant
// returned names. The pool has one connection, whose backend the cancels
// aim at; the state is read after Close, which leaves the Limiter usable.
func TestHotBatchCancelledInItsCommitOnAPoolHoldsNothingUnknownAfterClose(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewPool(t)
	pool := oneSessionPoolOn(t, admin.Config().ConnString())
	c, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	pid := int32(c.Conn().PgConn().PID())
	c.Release() // a cancel does not end the session: the pool keeps this one
	l := ratelimit.New(pool, ratelimit.WithoutCombining())
	defer l.Close()
	cancelHotCommits(t, admin, l, pid, l.Close)
}

// cancelHotCommits runs the rounds on l, whose hot batches run on the
// backend pid, reading the state on pool after settled (which lets the
// give-backs of l end).
func cancelHotCommits(t *testing.T, pool *pgxpool.Pool, l *ratelimit.Limiter, pid int32, settled func()) {
	ctx := context.Background()
	key, model := uniqueKey("hot"), uniqueKey("model")
	hour := pgtest.WindowWithRoom(t, pool, time.Hour, 2*time.Minute) // an hour or a few minutes more
	request := func(lease bool) ratelimit.BatchRequest {
		limits := []ratelimit.Limit{window("api_key", key, "tokens", 1e9, 1)}
		limits[0].Window = hour
		if lease {
			limits = append(limits, concurrent("model", model, 1e9))
		}
		return ratelimit.BatchRequest{Limits: limits}
	}
	unconfirmed := func() int64 {
		rows, err := testq.ReservationsByReason(ctx, pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
		if err != nil {
			t.Fatalf("ReservationsByReason: %v", err)
		}
		for _, r := range rows {
			if r.Reason == "unconfirmed" {
				if r.Status != ratelimit.StatusReleased {
					t.Fatalf("%d reservations %s as unconfirmed, want released", r.Reservations, r.Status)
				}
				return r.Reservations
			}
		}
		return 0
	}
	open := func() float64 {
		totals, err := testq.ReservationTotalsByScope(ctx, pool, dbtest.ReservationTotalsByScopeParams{ScopeType: "api_key", ScopeKey: key})
		if err != nil {
			t.Fatalf("ReservationTotalsByScope: %v", err)
		}
		sum := 0.0
		for _, row := range totals {
			sum += row.OpenAmount
		}
		return sum
	}

	var reserved, leases float64
	rounds, cancelled := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for ; ; rounds++ {
		lease := rounds%2 == 1
		delay := time.Duration(rand.Int64N(int64(3 * time.Millisecond)))
		fired := make(chan error, 1)
		go func() {
			time.Sleep(delay)
			_, err := testq.OpsCancelBackend(ctx, pool, pid)
			fired <- err
		}()
		grants, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{request(lease), request(lease)})
		if err := <-fired; err != nil {
			t.Fatalf("OpsCancelBackend: %v", err)
		}
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "57014":
			cancelled++
		case err != nil:
			t.Fatalf("round %d: ReserveCombined: %v, want success or a cancel (57014)", rounds, err)
		default:
			for i, g := range grants {
				if errs[i] != nil {
					t.Fatalf("round %d: admission %d: %v", rounds, i, errs[i])
				}
				reserved += float64(len(g.Reservations))
				leases += float64(len(g.Leases))
			}
		}
		if rounds%100 == 99 {
			settled()
			if unconfirmed() > 0 || open() != reserved || time.Now().After(deadline) {
				break
			}
		}
	}
	settled()
	n := unconfirmed()
	t.Logf("%d rounds, %d cancelled, %d reservations released as unconfirmed", rounds+1, cancelled, n)
	if held := open(); held != reserved {
		t.Errorf("open reservations hold %v tokens, want %v: those of the grants returned", held, reserved)
	}
	if live := float64(liveLeases(t, pool, "model", model)); live != leases {
		t.Errorf("%v live leases, want %v: those of the grants returned", live, leases)
	}
	assertBooksBalance(t, pool, "api_key", key)
	if n == 0 {
		t.Errorf("no cancel landed in a batch's commit in %d rounds (%d cancelled): the test saw nothing to check", rounds+1, cancelled)
	}
}
