package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A hot batch whose procedure fails after its first COMMIT (here the
// second transaction's pg_logical_emit_message, whose EXECUTE a DBA
// revoked: insufficient_privilege, class 42) may have committed: what its
// rows name is released as unconfirmed, and its requests must not be sent
// again one by one, which admits them a second time. The error's class
// used to decide it (rejectedInput): 42 counted as "rolled back whole",
// and each request was admitted twice, its first grant released behind it.
func TestHotBatchFailingAfterItsCommitIsNotRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	owner := pgtest.OpenPool(t, dbURL)
	gatewayURL, _ := pgtest.LeastPrivilegeURLs(t, dbURL)
	if err := testq.OpsRevokeLogicalMessages(ctx, pgtest.OpenPool(t, pgtest.AdminURL(t, dbURL))); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.OpenPool(t, gatewayURL)
	l := ratelimit.New(pool)

	// A statement in flight, stuck behind a row lock that a transaction
	// holds, so that the two Reserve calls queued next go together.
	blocker := hourLimits(t, owner, window("api_key", uniqueKey("blocker"), "requests", 100, 1))
	holder := heldTx(t, pool)
	if _, err := l.WithTx(holder).Reserve(ctx, "", "", blocker); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := l.Reserve(ctx, "", "", blocker); stuck <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the first statement")

	hot := hourLimits(t, owner, window("api_key", uniqueKey("hot"), "requests", 100, 1))
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := l.Reserve(ctx, "", "", hot); errs <- err }()
		awaitQueuedReserves(t, l, i+1, "a Reserve on the hot key")
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-stuck // a batch of one: no procedure
	admitted := 0
	for range 2 {
		if err := <-errs; err == nil {
			admitted++
		}
	}
	l.Close() // the release of what the batch named
	if s := l.Stats().Reserve; s.Hot == 0 {
		t.Fatalf("no hot batch was sent: %+v", s)
	}
	// Two Reserve calls on the hot key: two reservation rows at most, one
	// per call, however many of them were admitted.
	rows, err := testq.ReservationsByReason(ctx, owner, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: hot[0].Scope.Key})
	if err != nil {
		t.Fatalf("ReservationsByReason: %v", err)
	}
	var n int64
	for _, r := range rows {
		n += r.Reservations
	}
	if n > 2 {
		t.Errorf("%d reservation rows (%+v) for 2 Reserve calls, %d admitted: requests sent again after their batch committed", n, rows, admitted)
	}
}
