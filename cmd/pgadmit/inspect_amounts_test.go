package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// inspect prints amounts exactly as the database holds them. A window's,
// lease set's or holder's amount is a numeric sum of amounts, which may need
// more digits than a float64 holds: 1e14 and 1e-9 reserved (each a valid
// amount) are 100000000000000.000000001, which inspect printed as
// 100000000000000, and the room left as 900000000000000, though it is
// 899999999999999.999999999. A sum is also printed without the trailing
// zeros numeric keeps (0.5 + 0.5 is 1.0 there): 1, not 1.0. Its --json
// document holds them so too.
func TestInspectPrintsExactAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool)
	lim := ratelimit.New(pool)
	reserve := func(l ratelimit.Limit) {
		t.Helper()
		if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{l}); err != nil {
			t.Fatalf("reserve %+v: %v", l, err)
		}
	}
	for _, amount := range []float64{1e14, 1e-9} {
		reserve(ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "big"}, Metric: ratelimit.MetricTokens, Limit: 1e15, Amount: amount, Window: win})
		reserve(ratelimit.Limit{Scope: ratelimit.Scope{Type: "model", Key: "big"}, Metric: ratelimit.MetricConcurrent, Limit: 1e15, Amount: amount})
		p := db.AllotmentTakeParams{
			Holder: "gw-1", ScopeType: "provider", ScopeKey: "big", Metric: "tokens", WindowSeconds: int32(win / time.Second),
			LimitValue: 1e15, Want: amount, Need: amount,
		}
		if _, err := db.New().AllotmentTake(ctx, pool, p); err != nil {
			t.Fatalf("take a block: %v", err)
		}
	}
	for range 2 {
		reserve(ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "halves"}, Metric: ratelimit.MetricTokens, Limit: 10, Amount: 0.5, Window: win})
	}

	out := cliOK(t, "--database-url", url, "inspect")
	wt := windowText(win)
	for _, re := range []string{
		`(?m)^api_key:big\s+tokens\s+` + wt + `\s+0\s+100000000000000\.000000001\s+1000000000000000\s+899999999999999\.999999999\s`,
		`(?m)^api_key:halves\s+tokens\s+` + wt + `\s+0\s+1\s+10\s+9\s`,
		`(?m)^provider:big\s+tokens\s+` + wt + `\s+0\s+100000000000000\.000000001\s+1000000000000000\s+899999999999999\.999999999\s`,
		`(?m)^model:big\s+2\s+100000000000000\.000000001\s+1000000000000000\s+0\s`,
		`(?m)^provider:big\s+tokens\s+` + wt + `\s+gw-1\s+2\s+100000000000000\.000000001\s+0\s`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s:\n%s", re, out)
		}
	}
	// --json writes them as JSON numbers with the same digits, which a float64 would drop.
	doc := inspectJSON(t, "--database-url", url, "inspect", "--scope", "provider:big")
	if len(doc.Windows) != 1 || len(doc.Allotments) != 1 {
		t.Fatalf("inspect --scope provider:big --json: %+v, want a window and an allotment", doc)
	}
	if w, a := doc.Windows[0], doc.Allotments[0]; w.Reserved != "100000000000000.000000001" || w.Free != "899999999999999.999999999" ||
		w.Limit != "1000000000000000" || a.Granted != "100000000000000.000000001" {
		t.Errorf("inspect --json: window %+v, allotment %+v; want reserved and granted 100000000000000.000000001, free 899999999999999.999999999", w, a)
	}
	doc = inspectJSON(t, "--database-url", url, "inspect", "--scope", "model:big")
	if len(doc.Leases) != 1 || doc.Leases[0].LiveSlots != "100000000000000.000000001" {
		t.Errorf("inspect --scope model:big --json: leases %+v, want live_slots 100000000000000.000000001", doc.Leases)
	}
}
