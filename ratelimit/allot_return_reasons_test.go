package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A block gives the unused rest of its units back to its counter on each
// occasion the README names, each recorded as the block's reason: when its
// window ends (its holder still running, nothing closed), when it sits
// idle, and when its Limiter closes. A block whose window ended goes back
// before the doctor's grace for a lost holder, so that a live holder's
// block never outlives its window in the doctor's eyes.
func TestAllotReturnsItsRest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		reason       string
		window, idle time.Duration
	}{
		{"window_ended", 0, time.Hour}, // a short window with room (windowEndedLengths)
		{"idle", time.Hour, 300 * time.Millisecond},
		{"closed", time.Hour, time.Hour},
	} {
		t.Run(c.reason, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			w := c.window
			if c.reason == "window_ended" { // the block goes back as this very window ends
				// A window of 6 to 10 s with 5 s left, the one that ends soonest: the Reserve
				// below must land before its last Margin, a loaded machine's second or two late.
				w = pgtest.ShortWindowWithRoom(t, pool, windowEndedLengths, 5*time.Second)
			} else { // an hour's, or a few minutes more, with a minute left: it outlasts the test
				w = pgtest.WindowWithRoom(t, pool, w, time.Minute)
			}
			ctx := context.Background()
			l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: c.idle}))
			defer l.Close()
			key := uniqueKey("rest")
			lim := localWindow(w, key, 1000, 1)
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
			if err != nil || !g.Reservations[0].Local {
				t.Fatalf("Reserve: %+v, %v; want a Local admission", g, err)
			}
			if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 1}); err != nil {
				t.Fatal(err)
			}
			if c.reason == "closed" {
				l.Close()
			}
			var b dbtest.AllotmentListByScopeRow
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				blocks := allotments(t, pool, "model", key)
				if len(blocks) != 1 {
					t.Fatalf("%d blocks, want the one taken", len(blocks))
				}
				if b = blocks[0]; b.ReturnedAt != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("block %+v not returned in 30s, want it returned (%s)", b, c.reason)
				}
			}
			if b.Reason != c.reason || b.Used != 1 || b.Granted <= 1 {
				t.Errorf("block returned with reason %q, used %g of %g granted; want %q, used 1 of more", b.Reason, b.Used, b.Granted, c.reason)
			}
			if late := b.ReturnedAt.Sub(b.ExpiresAt); late >= ratelimit.DefaultLostAllotmentGrace {
				t.Errorf("block returned %v after its window ended, the doctor reports a live holder's block that late", late)
			}
			if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 1 || rows[0].ReservedValue != 0 {
				t.Errorf("counter %+v once the block is back, want used 1 (the commit), nothing reserved", rows)
			}
			assertBooksBalance(t, pool, "model", key)
			assertDoctorOK(t, pool)
		})
	}
}

// windowEndedLengths are the short windows TestAllotReturnsItsRest's window_ended case chooses
// from (pgtest.ShortWindowWithRoom): whole seconds, each longer than the 5 s it needs.
var windowEndedLengths = []time.Duration{6 * time.Second, 7 * time.Second, 8 * time.Second, 9 * time.Second, 10 * time.Second}
