package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
)

// A holder whose block of an ended window is still open (it is slow to
// return it, or dead) has it shown on a row of its own, apart from its block
// of the current window, saying how long ago it ended. inspect used to merge
// a holder's blocks of every window into one row: their units summed, the
// latest report of either, and the earliest end as a negative "ENDS IN".
func TestInspectShowsEachWindowOfAHolderApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool) // the second block's window is shown as current
	take := func(want float64, now *time.Time) {
		t.Helper()
		p := db.AllotmentTakeParams{
			Holder: "gw-1", ScopeType: "provider", ScopeKey: "gpt", Metric: "tokens", WindowSeconds: int32(win / time.Second),
			LimitValue: 10_000, Want: want, Need: 1, Now: now,
		}
		if r, err := db.New().AllotmentTake(ctx, pool, p); err != nil || r.Granted != strconv.FormatFloat(want, 'f', -1, 64) {
			t.Fatalf("take a block: %+v, %v", r, err)
		}
	}
	// A block of a window that ended three minutes ago at least.
	ago := win + 3*time.Minute
	past := time.Now().Add(-ago)
	take(300, &past)
	take(100, nil)

	out := cliOK(t, "--database-url", url, "inspect", "--scope", "provider:gpt")
	wt := windowText(win)
	for _, re := range []string{
		`(?m)^provider:gpt\s+tokens\s+` + wt + `\s+gw-1\s+1\s+300\s+0\s+` + strconv.Itoa(int(ago/time.Minute)) + `m(\d+s)? ago\s+ended \d+m(\d+s)? ago$`,
		`(?m)^provider:gpt\s+tokens\s+` + wt + `\s+gw-1\s+1\s+100\s+0\s+\d+s ago\s+` + leftText + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s:\n%s", re, out)
		}
	}
}
