package bench

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	percentile := func(groups []latencies, p int) time.Duration { return percentiles(groups, p)[0] }
	all := func(lat []time.Duration) []latencies {
		return []latencies{{kept: slices.Clone(lat), ops: int64(len(lat))}}
	}
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // not sorted: percentile sorts
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	if got := percentile(all(lat), 50); got != 50*time.Microsecond {
		t.Errorf("p50 of 1..100 µs = %s, want 50µs", got)
	}
	if got := percentile(all(lat), 99); got != 99*time.Microsecond {
		t.Errorf("p99 of 1..100 µs = %s, want 99µs", got)
	}
	if got := percentile(all(lat[:1]), 99); got != 100*time.Microsecond {
		t.Errorf("p99 of one sample = %s, want it", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %s, want 0", got)
	}
	// Split between workers that kept all their latencies, the same nearest rank.
	halves := []latencies{{kept: slices.Clone(lat[:30]), ops: 30}, {kept: slices.Clone(lat[30:]), ops: 70}}
	if got := percentile(halves, 50); got != 50*time.Microsecond {
		t.Errorf("p50 of 1..100 µs kept by two workers = %s, want 50µs", got)
	}
}

// A worker that kept a sample of its latencies (more operations than it keeps) stands for all
// its operations: one that decided 1,000 operations in 1 µs each and kept 10 of them weighs a
// hundred times as much as one that decided 10 in 100 µs, and p99 is 1 µs. Merged as if each
// kept latency were one operation, half of them would be 100 µs.
func TestPercentileWeighsASampleByItsOperations(t *testing.T) {
	t.Parallel()
	percentile := func(groups []latencies, p int) time.Duration { return percentiles(groups, p)[0] }
	fast := latencies{ops: 1000}
	slow := latencies{ops: 10}
	for range 10 {
		fast.kept = append(fast.kept, time.Microsecond)
		slow.kept = append(slow.kept, 100*time.Microsecond)
	}
	if got := percentile([]latencies{fast, slow}, 99); got != time.Microsecond {
		t.Errorf("p99 of 1,000 operations of 1µs (10 kept) and 10 of 100µs = %s, want 1µs", got)
	}
	if got := percentile([]latencies{fast, slow}, 100); got != 100*time.Microsecond {
		t.Errorf("p100 of them = %s, want 100µs", got)
	}
}

// However fast its operations, a workload keeps at most keep latencies per worker (W8 decides
// about a million a second: an hour of it kept billions), and its percentiles come from them.
func TestDriveKeepsABoundedSampleOfLatencies(t *testing.T) {
	t.Parallel()
	const workers, keep = 2, 100
	r := &runner{cfg: Config{Workers: workers}, keep: keep, paused: make([]time.Duration, workers), counts: make([]opsCounter, workers)}
	s, err := r.drive(context.Background(), 50*time.Millisecond, func(context.Context, int, *mrand.Rand) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if s.res.Ops <= workers*keep {
		t.Skipf("only %d operations in 50ms: too few to fill the sample", s.res.Ops)
	}
	var ops int64
	for w, l := range s.lat {
		if len(l.kept) > keep {
			t.Errorf("worker %d kept %d latencies of %d operations, want at most %d", w, len(l.kept), l.ops, keep)
		}
		ops += l.ops
	}
	if ops != s.res.Ops {
		t.Errorf("the latencies stand for %d operations, want the %d decided", ops, s.res.Ops)
	}
	if res := summarize(s); res.P99ns <= 0 || res.P99ns < res.P50ns {
		t.Errorf("p50 %dns, p99 %dns of a sample", res.P50ns, res.P99ns)
	}
}

func TestExactWindowNeverRollsOver(t *testing.T) {
	t.Parallel()
	for _, now := range []time.Time{
		time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC),   // a window just started
		time.Date(2026, 5, 20, 12, 59, 30, 0, time.UTC), // 30 s before the hour
		time.Date(2026, 5, 20, 23, 59, 59, 0, time.UTC), // 1 s before the day
		time.Date(2026, 5, 20, 23, 59, 0, 0, time.UTC),  // a minute before the day
	} {
		w, err := exactWindow(now, 2*time.Second)
		if err != nil {
			t.Fatalf("exactWindow(%s): %v", now, err)
		}
		ws := int64(w / time.Second)
		left := time.Duration(ws-now.Unix()%ws) * time.Second
		if left <= 2*time.Second+time.Minute {
			t.Errorf("exactWindow(%s) = %s, which ends in %s", now, w, left)
		}
	}
}

func TestParseOnly(t *testing.T) {
	t.Parallel()
	got, err := ParseOnly(" w4, W1 ,w4")
	if err != nil || !slices.Equal(got, []string{"W4", "W1"}) {
		t.Errorf("ParseOnly = %v, %v; want [W4 W1]", got, err)
	}
	if got, err := ParseOnly(""); err != nil || got != nil {
		t.Errorf("ParseOnly(\"\") = %v, %v; want nothing", got, err)
	}
	if _, err := ParseOnly("W1,W10"); err == nil {
		t.Error("ParseOnly accepted W10")
	}
}

func TestSteady(t *testing.T) {
	t.Parallel()
	results := []Result{
		{Name: "W1 window, many keys", OpsPerS: 100, Round: 1},
		{Name: "W2 gateway request", OpsPerS: 50, Round: 1},
		{Name: "W1 window, many keys", OpsPerS: 90, Round: 2},
		{Name: "W2 gateway request", OpsPerS: 0, Round: 2},
		{Name: "W1 window, many keys", OpsPerS: 80, Round: 3},
		{Name: "W2 gateway request", OpsPerS: 45, Round: 3},
	}
	want := []Steadiness{
		{Workload: "W1 window, many keys", Rounds: 3, FirstOpsPerS: 100, LastOpsPerS: 80, LastOverFirst: 0.8},
		{Workload: "W2 gateway request", Rounds: 3, FirstOpsPerS: 50, LastOpsPerS: 45, LastOverFirst: 0.9},
	}
	if got := Steady(results); !slices.Equal(got, want) {
		t.Errorf("Steady = %+v, want %+v", got, want)
	}
	if got := Steady(results[:2]); len(got) != 0 {
		t.Errorf("Steady of one round = %+v, want nothing", got)
	}
	if got := Steady([]Result{{Name: "W3 hot key"}, {Name: "W3 hot key", OpsPerS: 5}}); len(got) != 1 || got[0].LastOverFirst != 0 {
		t.Errorf("Steady with an empty first round = %+v, want a ratio of 0", got)
	}
	if code := want[1].Code(); code != "W2" {
		t.Errorf("Code() = %q", code)
	}
}

func TestRunRefusesMoreInstancesThanWorkers(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), nil, Config{Workers: 2, Instances: 3, Duration: time.Second}, nil)
	if err == nil || !strings.Contains(err.Error(), "3 instances need at least as many workers, got 2") {
		t.Errorf("Run with 3 instances and 2 workers: %v", err)
	}
}

// An operation that failed (the database down, say: refused in microseconds) is no admission
// decision: it counts under Errors only, not in ops/s or the latencies, which would otherwise
// report a run against a stopped server as its fastest.
func TestFailedOperationsCountNeitherInOpsNorInLatency(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{Workers: 3}, paused: make([]time.Duration, 3), counts: make([]opsCounter, 3)}
	down := errors.New("dial tcp: connection refused")
	var succeeded atomic.Int64
	s, err := r.drive(context.Background(), 200*time.Millisecond, func(ctx context.Context, worker int, _ *mrand.Rand) error {
		switch worker {
		case 0:
			time.Sleep(20 * time.Millisecond)
			succeeded.Add(1)
			return nil
		case 1:
			time.Sleep(time.Millisecond)
			return errCommit{down} // admitted, then its Commit failed
		default:
			time.Sleep(time.Millisecond)
			return down
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	res := summarize(s)
	if res.Errors == 0 {
		t.Fatal("no errors counted")
	}
	if res.Ops != succeeded.Load() {
		t.Errorf("ops %d, want the %d that succeeded: failed operations counted as operations", res.Ops, succeeded.Load())
	}
	if res.P50ns < int64(20*time.Millisecond) {
		t.Errorf("p50 %s below the successful operations' 20ms: failed operations counted in the latency", time.Duration(res.P50ns))
	}
}

// Run's errors name the workload, not the package: the command prints them after its own
// "pgadmit bench:", which read "pgadmit bench: bench: W4 exactness: ..." with the database down.
func TestRunErrorsNameTheWorkloadOnly(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cfg := Config{Workers: 1, Duration: time.Second, Only: []string{"W3"},
		BeforeEach: func(context.Context, Workload, int) error { return boom }}
	_, err := Run(context.Background(), pgtest.NewPool(t), cfg, nil)
	if !errors.Is(err, boom) || err.Error() != "before W3 hot key: boom" {
		t.Errorf("Run with a failing BeforeEach: %v, want \"before W3 hot key: boom\"", err)
	}
}
