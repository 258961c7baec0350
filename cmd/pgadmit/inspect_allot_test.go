package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
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
	pgtest.AwaitRoomInWindow(t, pool, time.Minute, 20*time.Second)
	take := func(want float64, now *time.Time) {
		t.Helper()
		p := db.AllotmentTakeParams{
			Holder: "gw-1", ScopeType: "provider", ScopeKey: "gpt", Metric: "tokens", WindowSeconds: 60,
			LimitValue: 10_000, Want: want, Need: 1, Now: now,
		}
		if r, err := db.New().AllotmentTake(ctx, pool, p); err != nil || r.Granted != strconv.FormatFloat(want, 'f', -1, 64) {
			t.Fatalf("take a block: %+v, %v", r, err)
		}
	}
	past := time.Now().Add(-3 * time.Minute)
	take(300, &past)
	take(100, nil)

	out := cliOK(t, "--database-url", url, "inspect", "--scope", "provider:gpt")
	for _, re := range []string{
		`(?m)^provider:gpt\s+tokens\s+1m\s+gw-1\s+1\s+300\s+0\s+3m(\d+s)? ago\s+ended \d+m(\d+s)? ago$`,
		`(?m)^provider:gpt\s+tokens\s+1m\s+gw-1\s+1\s+100\s+0\s+\d+s ago\s+(1m|\d+s)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s:\n%s", re, out)
		}
	}
}
