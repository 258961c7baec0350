package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Close whose return of a block fails (here: the counter row locked past
// the pool's lock_timeout; a database that does not answer is the same)
// leaves the block to Recover, which returns it once its window is over,
// charging its holder's last report: nothing this Limiter does reaches it
// any more. A Commit or Release of what it admitted from the block then
// reports it StatusUnknown, Settled false, for the grant itself and for a
// copy decoded from JSON alike, and the Limiter lets go of the block's
// admissions. Both used to settle in memory and report Settled true with
// the actual amount (listed in Overages when above the estimate), which no
// counter ever recorded, and the Limiter kept the block's admissions for
// good.
func TestLocalSettleAfterAFailedCloseIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, admin := lockBoundedPools(t)
	hour := hourWindow(t, admin)
	l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	defer l.Close()
	key := uniqueKey("closefailed")
	grant := reserveLocal(t, l, hour, key, 1000, 10)
	copied := throughJSON(t, reserveLocal(t, l, hour, key, 1000, 10))

	unlock := lockCounter(t, admin, key)
	l.Close() // its return waits for the counter's lock, and times out
	unlock()
	open := openBlocks(t, admin, key)
	if len(open) != 1 {
		t.Fatalf("%d open block(s) after a Close that could not return it, want 1", len(open))
	}
	if s := l.Stats().Local; s.Abandoned != 1 || s.Failed == 0 || s.LastError == nil {
		t.Errorf("Stats().Local = %+v after a Close that could not return its block, want it abandoned, the failed return and its error", s)
	}
	before := counterRows(t, admin, "model", key)

	unknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10}
	for _, c := range []struct {
		name string
		g    ratelimit.Grant
	}{{"the grant itself", grant}, {"the grant itself, again", grant}, {"a copy", copied}} {
		s, err := l.Commit(ctx, c.g, map[string]float64{ratelimit.MetricTokens: 15})
		if err != nil || len(s.Reservations) != 1 || s.Reservations[0] != unknown || len(s.Overages()) != 0 {
			t.Errorf("Commit of %s after a failed Close = %+v (overages %+v), %v; want %+v, no overage", c.name, s, s.Overages(), err, unknown)
		}
	}
	if s, err := l.Release(ctx, copied, "late"); err != nil || len(s.Reservations) != 1 || s.Reservations[0] != unknown {
		t.Errorf("Release of a copy after a failed Close = %+v, %v; want %+v", s, err, unknown)
	}
	if n := l.LocalAdmissionsKept(); n != 0 {
		t.Errorf("admissions kept after Close = %d, want 0", n)
	}
	if after := counterRows(t, admin, "model", key); len(after) != 1 || after[0] != before[0] {
		t.Errorf("counter %+v after the late settles, want it unchanged: %+v", after, before)
	}

	// Recover returns the block once its window and the grace are over,
	// and the books balance.
	var clock testClock
	clock.pass(open[0].ExpiresAt.Add(ratelimit.DefaultLostAllotmentGrace + time.Minute))
	m := ratelimit.NewMaintenance(admin, ratelimit.WithMaintenanceClock(clock.now))
	if rec, err := m.Recover(ctx); err != nil || rec.ReturnedAllotments != 1 {
		t.Fatalf("Recover = %+v, %v; want the block returned", rec, err)
	}
	if rows := counterRows(t, admin, "model", key); len(rows) != 1 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v after Recover, want reserved 0", rows)
	}
	assertBooksBalance(t, admin, "model", key)
}
