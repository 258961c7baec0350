package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// W4 reads back the window it admitted in, not whichever current window its scope has: with
// --rounds, a later round may pick another window length than an earlier one (exactWindow
// takes a day when the hour is about to end), and the earlier round's window, released but
// still current, is then a second current window of the scope.
func TestW4ReadsBackItsOwnWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const runID = "w4window"
	// W4 checks that the window limit was reached: the run must be long enough for its workers to
	// admit 100 on a machine busy with the rest of the suite (300 ms with 2 workers admitted 17).
	cfg := Config{Workers: 4, Duration: time.Second, ExactnessDuration: 3 * time.Second, Only: []string{"W4"}, RunID: runID}

	// An earlier round's W4 window, of a length exactWindow never picks: admitted and
	// released, as W4 leaves it.
	lim := ratelimit.New(pool)
	defer lim.Close()
	g, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "bench-" + runID + "-w4"},
		Metric: ratelimit.MetricRequests, Limit: w4WindowLimit, Amount: 1, Window: 2 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Release(ctx, g, "earlier round"); err != nil {
		t.Fatal(err)
	}

	results, err := Run(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("Run of W4: %d results", len(results))
	}
	for _, c := range results[0].Checks {
		if !c.OK {
			t.Errorf("W4 check %q: got %d, want %d", c.Name, c.Got, c.Want)
		}
	}
}
