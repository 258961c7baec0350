package main

import (
	"context"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// doctor prints a problem's amounts exactly, as psql shows them: a counter
// 1e-9 off its ledger's sum of 1e14 and 1e-9 (each a valid amount) holds
// 100000000000000.000000002 where 100000000000000.000000001 is due, and
// doctor printed "expected 1e+14, actual 1e+14", the two float64s. Its
// --json document holds them so too.
func TestDoctorPrintsExactAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool) // both Reserves meet on one counter row
	lim := ratelimit.New(pool)
	for _, amount := range []float64{1e14, 1e-9} {
		l := ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "big"}, Metric: ratelimit.MetricTokens, Limit: ratelimit.MaxAmount, Amount: amount, Window: win}
		if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{l}); err != nil {
			t.Fatalf("reserve %g: %v", amount, err)
		}
	}
	n, err := dbtest.New().OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
		ScopeType: "api_key", ScopeKey: "big", Metric: ratelimit.MetricTokens, ReservedDelta: 1e-9,
	})
	if err != nil || n != 1 {
		t.Fatalf("OpsCounterCorruptAdd = %d, %v", n, err)
	}

	out, errOut, code := cli(t, nil, "--database-url", url, "doctor")
	want := "counter_reserved_mismatch: api_key:big tokens, window " + durationtext.Operator(win) + " from "
	const amounts = ": expected 100000000000000.000000001, actual 100000000000000.000000002\n"
	if code != exitFailure || !strings.Contains(out, want) || !strings.Contains(out, amounts) {
		t.Errorf("doctor: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d and a line %q...%q", code, out, errOut, exitFailure, want, amounts)
	}
	// --json writes them as JSON numbers with the same digits, which a float64 would drop.
	out, errOut, code = cli(t, nil, "--database-url", url, "doctor", "--json", "-")
	const inJSON = `"expected": 100000000000000.000000001,` + "\n" + `      "actual": 100000000000000.000000002` + "\n"
	if code != exitFailure || !strings.Contains(out, inJSON) {
		t.Errorf("doctor --json -: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d and %q", code, out, errOut, exitFailure, inJSON)
	}
}
