package bench

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// T1 runs only when Only lists it: the default run is W1..W9, as measured
// and compared (compare-seed lists its own), and leaves no task rows.
func TestT1RunsOnlyWhenListed(t *testing.T) {
	t.Parallel()
	var byDefault, listed []string
	for _, w := range Workloads() {
		if (Config{}).runs(w) {
			byDefault = append(byDefault, w.Code)
		}
		if (Config{Only: []string{"T1", "W2"}}).runs(w) {
			listed = append(listed, w.Code)
		}
	}
	if want := []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9"}; !slices.Equal(byDefault, want) {
		t.Errorf("the default run runs %v, want %v", byDefault, want)
	}
	if !slices.Equal(listed, []string{"W2", "T1"}) {
		t.Errorf("Only T1,W2 runs %v, want [W2 T1] (in the workloads' order)", listed)
	}
	if got, err := ParseOnly("t1"); err != nil || !slices.Equal(got, []string{"T1"}) {
		t.Errorf("ParseOnly(\"t1\") = %v, %v; want [T1]", got, err)
	}
}

// Every task T1 runs is created, heartbeated 3 times and finished: each
// step's calls are counted once per admission (3 heartbeats), its checks
// pass, and the tasks read back all succeeded, holding nothing.
func TestT1RunsEveryTaskToItsEnd(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	out, err := Run(context.Background(), pool, Config{Workers: 4, Duration: 500 * time.Millisecond, Only: []string{"T1"}, Rounds: 2}, nil)
	if err != nil || len(out) != 2 {
		t.Fatalf("Run: %+v, %v; want two rounds", out, err)
	}
	for _, res := range out {
		if !res.OK || res.Admitted == 0 || res.Rejected != 0 || res.Ops != res.Admitted {
			t.Errorf("T1 round %d: ok %t, %d ops, %d admitted, %d refused, %d errors (%s), checks %+v",
				res.Round, res.OK, res.Ops, res.Admitted, res.Rejected, res.Errors, res.FirstError, res.Checks)
		}
		for _, want := range []string{
			"api keys requests/min: requests charged", "api keys tokens/min: tokens charged", "models concurrency: leases still held",
			"tasks succeeded", "tasks unfinished", "tasks' queue places still held", "tasks' reservations still open",
			"reservations FinishTask released uncommitted",
		} {
			if checkNamed(res.Checks, want) == nil {
				t.Errorf("T1 round %d: no check %q among %+v", res.Round, want, res.Checks)
			}
		}
		// The second round's tasks are its own: it does not count the first's.
		if c := checkNamed(res.Checks, "tasks succeeded"); c != nil && c.Want != res.Admitted {
			t.Errorf("T1 round %d: %+v, want %d (its admissions)", res.Round, *c, res.Admitted)
		}
		var names []string
		for _, s := range res.Steps {
			names = append(names, s.Name)
			calls := res.Admitted
			if s.Name == "heartbeat" {
				calls *= t1Heartbeats
			}
			if s.Calls != calls || s.P50us <= 0 || s.P99us < s.P50us {
				t.Errorf("T1 round %d: step %+v for %d admissions, want %d calls and p50 <= p99", res.Round, s, res.Admitted, calls)
			}
		}
		if !slices.Equal(names, []string{"create", "reserve", "heartbeat", "commit", "finish"}) {
			t.Errorf("T1 round %d: steps %v", res.Round, names)
		}
	}
}

// A task of the run's kind left running while T1 runs (what a finish lost,
// or a task T1 did not end, would leave) fails "tasks unfinished" by exactly
// that task, and only it: the books of its keys stay right.
func TestT1CatchesATaskLeftRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	lim := ratelimit.New(pool)
	defer lim.Close()
	cfg := Config{Workers: 2, Duration: time.Second, Only: []string{"T1"}, RunID: "left", ProgressEvery: 100 * time.Millisecond}
	var mu sync.Mutex
	var created int
	var createErr error
	cfg.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if created == 0 && createErr == nil {
			_, createErr = lim.CreateTask(ctx, ratelimit.TaskSpec{Kind: "bench-left-t1-r1", Worker: "elsewhere"})
			created++
		}
	}
	out, err := Run(ctx, pool, cfg, nil)
	if err != nil || len(out) != 1 || createErr != nil || created != 1 {
		t.Fatalf("Run: %+v, %v; the task left running: %d, %v", out, err, created, createErr)
	}
	res := out[0]
	for _, c := range res.Checks {
		if strings.HasPrefix(c.Name, "tasks unfinished") {
			if c.OK || c.Got != 1 {
				t.Errorf("%+v, want it failed by the 1 task left running", c)
			}
		} else if !c.OK {
			t.Errorf("%+v failed, want only \"tasks unfinished\" failed", c)
		}
	}
	if res.OK || checkNamed(res.Checks, "tasks unfinished") == nil {
		t.Errorf("ok %t, checks %+v; want \"tasks unfinished\" failed", res.OK, res.Checks)
	}
}
