package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Prune that runs before Recover has returned a lost block (its window
// ended long before Prune's cutoff, its holder died after reporting 25)
// keeps the block and its counter, however short Prune's retention and
// however long the lost-holder grace: the open block's granted units are in
// its counter's reserved_value, and Prune deletes only counters with none,
// and only returned blocks. Recover then charges the 25, and the next
// Prune deletes both.
func TestPruneBeforeRecoverKeepsALostBlockAndItsCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	key := uniqueKey("lostprune")
	past := time.Now().Add(-3 * time.Hour)
	b, err := queries.AllotmentTake(ctx, pool, db.AllotmentTakeParams{
		Holder: "h", ScopeType: "model", ScopeKey: key, Metric: "tokens",
		WindowSeconds: 3600, LimitValue: 1000, Want: 100, Need: 1, Now: &past,
	})
	if err != nil || !b.AllotmentID.Valid || b.Granted != "100" {
		t.Fatalf("AllotmentTake: %+v, %v", b, err)
	}
	if row, err := queries.AllotmentSync(ctx, pool, db.AllotmentSyncParams{Ids: []pgtype.UUID{b.AllotmentID}, Consumed: []string{"25"}}); err != nil || row.Synced != 1 {
		t.Fatalf("AllotmentSync: %d, %v", row.Synced, err)
	}
	// The holder's last report is older than the grace on this clock.
	var clock testClock
	clock.advance(time.Minute)
	m := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(clock.now))

	res, err := m.Prune(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Counters != 0 || res.Allotments != 0 {
		t.Fatalf("Prune before Recover = %+v; want the lost block's counter and the block kept", res)
	}
	if open := openBlocks(t, pool, key); len(open) != 1 {
		t.Fatalf("open blocks after Prune = %d, want the lost one", len(open))
	}
	rec, err := m.Recover(ctx)
	if err != nil || rec.ReturnedAllotments != 1 {
		t.Fatalf("Recover = %+v, %v; want the lost block returned", rec, err)
	}
	if got := allotments(t, pool, "model", key); len(got) != 1 || got[0].Used != 25 {
		t.Fatalf("blocks after Recover = %+v; want the block returned with its 25 used", got)
	}
	assertDoctorOK(t, pool) // the counter was there to charge the 25
	res, err = m.Prune(ctx, time.Second)
	if err != nil || res.Counters != 1 || res.Allotments != 1 {
		t.Fatalf("Prune after Recover = %+v, %v; want the counter and the block deleted", res, err)
	}
}
