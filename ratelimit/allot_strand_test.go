package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The stranding bound (README, Stranding), checked against what the
// database records. Two Limiters, each on its own pool, admit requests of
// 15 tokens from blocks of 100 (1/16 of 1,600) until each has set five
// blocks aside, every one trimmed to what it admitted; then, as a gateway
// does, they commit all but one request of each block below its estimate
// (5 of 15), the one left standing for an upstream call still running at
// the window's end. A third Limiter fills the window in the database until
// it refuses. At the window's end the blocks still open then held, unused,
// their granted units less what they charged: at most two blocks' worth
// per Limiter. A block trimmed to its estimates kept the units its requests
// did not use until its last request settled (250 per Limiter here), while
// the window refused.
func TestLocalStrandingAcrossLimitersStaysWithinTheBound(t *testing.T) {
	t.Parallel()
	const limiters, limit, amount, actual, setAside = 2, 1600.0, 15.0, 5.0, 5
	ctx := context.Background()
	url := pgtest.NewURL(t)
	admin := pgtest.OpenPool(t, url)
	// A window of 12 to 20 s with 9 s left for what comes before the refusals (a second or
	// two on a busy machine), the one that ends soonest: the test waits for its end.
	var lengths []time.Duration
	for s := 12; s <= 20; s++ {
		lengths = append(lengths, time.Duration(s)*time.Second)
	}
	windowLen := pgtest.ShortWindowWithRoom(t, admin, lengths, 9*time.Second)
	key := uniqueKey("strand")
	lim := func(local bool) []ratelimit.Limit {
		w := window("model", key, ratelimit.MetricTokens, limit, amount)
		w.Window, w.Local = windowLen, local
		return []ratelimit.Limit{w}
	}

	var kept []ratelimit.Grant // one per block, in flight at the window's end
	var keptBy []*ratelimit.Limiter
	ls := make([]*ratelimit.Limiter, limiters)
	for i := range ls {
		ls[i] = ratelimit.New(pgtest.OpenPool(t, url), ratelimit.WithAllotments(ratelimit.AllotmentOptions{Horizon: time.Hour, IdleAfter: time.Minute}))
		defer ls[i].Close()
		var order []string                        // blocks, as requests came from them
		byBlock := map[string][]ratelimit.Grant{} // the requests of each
		for len(order) <= setAside {
			g, err := ls[i].Reserve(ctx, "", "", lim(true))
			if err != nil || !g.Reservations[0].Local {
				t.Fatalf("Limiter %d: Reserve: %+v, %v; want a Local admission", i, g, err)
			}
			b := g.Reservations[0].Allotment
			if byBlock[b] == nil {
				order = append(order, b)
			}
			byBlock[b] = append(byBlock[b], g)
		}
		// The blocks set aside are trimmed to what they admitted (the
		// next block's statement, or the housekeeping's next round).
		for _, b := range order[:setAside] {
			want := amount * float64(len(byBlock[b]))
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if granted := blockGranted(t, admin, key, b); granted == want {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("Limiter %d: block %s set aside holds %g, want it trimmed to the %g it admitted", i, b, granted, want)
				}
			}
		}
		for _, b := range order {
			gs := byBlock[b]
			kept = append(kept, gs[0])
			keptBy = append(keptBy, ls[i])
			for _, g := range gs[1:] {
				if _, err := ls[i].Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: actual}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // five rounds of the housekeeping

	// Another process fills the window in the database until it refuses.
	filler := ratelimit.New(pgtest.OpenPool(t, url))
	defer filler.Close()
	refused := 0
	var filled []ratelimit.Grant
	for refused < 3 {
		g, err := filler.Reserve(ctx, "", "", lim(false))
		var ex *ratelimit.ExceededError
		switch {
		case errors.As(err, &ex):
			refused++
		case err != nil:
			t.Fatal(err)
		default:
			filled = append(filled, g)
		}
	}

	blocks := allotments(t, admin, "model", key)
	windowStart, end := blocks[0].WindowStart, blocks[0].ExpiresAt
	if now := pgtest.DBNow(t, admin); !now.Before(end.Add(-ratelimit.DefaultAllotmentMargin)) {
		t.Fatalf("the window refused at %s, past its admitting part (it ends at %s): the machine was too slow", now, end)
	}
	waitPast(t, admin, end)
	for i, g := range kept {
		if _, err := keptBy[i].Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: amount}); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range ls {
		l.Close()
	}
	for _, g := range filled {
		if _, err := filler.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Units unused in the blocks still open at the window's end (give or
	// take the Margin and a round of the housekeeping, by which a block
	// whose window ends goes back): granted, trimmed or not, less charged.
	unused := map[string]float64{}
	total := 0.0
	for _, b := range allotments(t, admin, "model", key) {
		if !b.WindowStart.Equal(windowStart) {
			t.Fatalf("block %s of window %s: the run straddled two windows", b.ID, b.WindowStart)
		}
		if b.ReturnedAt == nil {
			t.Fatalf("block %+v still open once its Limiter closed", b)
		}
		if b.ReturnedAt.Before(end.Add(-ratelimit.DefaultAllotmentMargin - 200*time.Millisecond)) {
			continue
		}
		u := max(b.Granted-b.Used, 0)
		unused[b.Holder] += u
		total += u
	}
	share := limit * ratelimit.DefaultAllotmentMaxShare
	for h, u := range unused {
		if u > 2*share {
			t.Errorf("holder %s: %g units unused in its blocks at the window's end while the window refused, bound 2 × %g", h, u, share)
		}
	}
	if bound := limiters * 2 * share; total > bound {
		t.Errorf("%g units unused in blocks at the window's end while %d requests were refused, bound %g (%d Limiters × 2 × %g)", total, refused, bound, limiters, share)
	}
	for _, c := range counterRows(t, admin, "model", key) {
		if c.UsedValue+c.ReservedValue > limit || c.ReservedValue != 0 {
			t.Errorf("window %s: used %g, reserved %g; want at most %g, nothing reserved", c.WindowStart, c.UsedValue, c.ReservedValue, limit)
		}
	}
	assertBooksBalance(t, admin, "model", key)
	t.Logf("unused at the window's end per holder: %v (%g in all); %d refused", unused, total, refused)
}

// blockGranted reads what block id of the model key holds now.
func blockGranted(t *testing.T, conn db.DBTX, key, id string) float64 {
	t.Helper()
	for _, b := range allotments(t, conn, "model", key) {
		if b.ID.String() == id {
			return b.Granted
		}
	}
	t.Fatalf("no block %s", id)
	return 0
}
