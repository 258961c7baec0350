package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	start := time.Now()
	out := cliOK(t, "--database-url", url, "demo", "--duration", "5s", "--instances", "2", "--clients", "4", "--keys", "20")
	t.Logf("demo took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, re := range []string{
		// Live progress, one line a second.
		`(?m)^\s+1s\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+`,
		`(?m)^\s+5s\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+`,
		// The crash, its recovery and their summary.
		`gw-2 KILLED with \d+ requests? in flight: \d+ tasks? running, \d+ reservations? and \d+ leases? held`,
		`gw-2's capacity is back, \d+\.\ds after the crash`,
		`(?m)^\s+gw-2 \(killed\)(\s+\d+){7}\s+\d+\s`,
		`what gw-2's tasks hold now: 0 tasks unfinished, 0 reservations, 0 leases`,
		// Durations as an operator writes them (10m), not as Go does (10m0s).
		`(?m)^running for 5s; the last instance is killed at 2s$`,
		`\(execution lease 4s, sweeper every 1s\); without recovery\n\s+the leases would have blocked their model's slots for their whole TTL \(10m\)`,
		`(?m)^\s+failed\s+server_restarted\s+\d+$`,
		`(?m)^\s+succeeded\s+-\s+\d+$`,
		`(?m)^\s+large\s+10\s+\d+ ok\s+\d+\s+\d+$`,
		`windows of 20 keys checked: no requests window above its limit`,
		`a last recovery pass: nothing to recover`,
		`doctor: the books balance`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("demo output does not match %s", re)
		}
	}
	if strings.Contains(out, "PROBLEM") {
		t.Errorf("demo reported a problem")
	}
	// The requests the instances count as completed are the tasks the database holds as
	// succeeded, the killed instance's included.
	completed := regexp.MustCompile(`(?m)^\s+total(?:\s+\d+){2}\s+(\d+)\s`).FindStringSubmatch(out)
	succeeded := regexp.MustCompile(`(?m)^\s+succeeded\s+-\s+(\d+)$`).FindStringSubmatch(out)
	if completed == nil || succeeded == nil || completed[1] != succeeded[1] {
		t.Errorf("completed requests in the summary %v, succeeded tasks in the database %v: want the same count", completed, succeeded)
	}
	// The databases's doctor agrees after the demo.
	cliOK(t, "--database-url", url, "doctor")
}

// The check of every key's windows says what it found: a requests window above its limit is a
// problem, and the line under the busiest keys does not claim that there was none.
func TestDemoKeysCheckReportsAWindowAboveItsLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var out strings.Builder
	d := &demo{out: &out, ops: pool, prefix: "demo-test/"}
	d.keys = []demoKey{{scope: ratelimit.Scope{Type: "api_key", Key: d.prefix + "key-0000"}, plan: planFree}}
	d.requested = make(requestedKeys, len(d.keys))
	d.requested.mark(0)
	// A request committed above its estimate: recorded, and its window's used value passes
	// the limit, as an admission that broke the limit would.
	lim := ratelimit.New(pool)
	defer lim.Close()
	g, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{{Scope: d.keys[0].scope, Metric: ratelimit.MetricRequests,
		Limit: planFree.requestsMin, Amount: 1, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Commit(ctx, g, map[string]float64{ratelimit.MetricRequests: planFree.requestsMin + 1}); err != nil {
		t.Fatal(err)
	}
	var problems []string
	if err := d.printKeys(ctx, &problems); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "above its limit") {
		t.Errorf("problems = %q, want one window above its limit", problems)
	}
	if strings.Contains(out.String(), "no requests window above its limit") {
		t.Errorf("printKeys says no window was above its limit:\n%s", out.String())
	}
}

// The largest demo the flags allow, 16 instances of 64 clients, would ask for 1,024
// connections: each instance's pool is cut down so that all of them fit in the server's
// max_connections, beside the operator's pool.
func TestDemoConnectionsFitTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	setting := func(name string) int {
		v, err := db.New().BenchServerSetting(ctx, pool, name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	room := setting("max_connections") - setting("superuser_reserved_connections") - 4
	for _, tc := range []struct{ instances, clients int }{{3, 12}, {16, 64}, {2, 64}} {
		each, err := demoConnections(ctx, pool, tc.instances, tc.clients)
		if err != nil {
			t.Fatalf("%d instances of %d clients: %v", tc.instances, tc.clients, err)
		}
		if each < 1 || each > tc.clients || each*tc.instances > room {
			t.Errorf("%d instances of %d clients: %d connections each, for %d connections of room", tc.instances, tc.clients, each, room)
		}
	}
	if each, _ := demoConnections(ctx, pool, 3, 12); room >= 3*12+8 && each != 12 {
		t.Errorf("3 instances of 12 clients: %d connections each, want one per client", each)
	}
}

// syncWriter is an io.Writer that a test may read while the demo writes to it.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// The killed instance's capacity often comes back while the live instances drain (a large demo's
// drain takes many seconds): the demo follows the crash during the drain, so that the time it
// reports is when the capacity came back, not when the drain ended.
func TestDemoFollowsTheCrashWhileDraining(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := pgtest.NewPool(t)
	out := &syncWriter{}
	d := &demo{out: out, ops: ops, start: time.Now(), grace: grace.After(ctx, grace.Default)}
	victim := &gateway{name: "gw-2"}
	// A dead instance whose tasks hold nothing any more: recovery already gave it all back.
	crash := &crashWatch{gw: victim, ids: []pgtype.UUID{}}

	// A live instance whose last client finishes only once the demo has seen the capacity come
	// back (or after 10s, when it never looks).
	live := &gateway{d: d, name: "gw-1", pool: pgtest.NewPool(t)}
	live.lim = ratelimit.New(live.pool)
	live.wg.Add(1)
	var released time.Duration
	go func() {
		defer live.wg.Done()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "gw-2's capacity is back") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		released = d.since()
	}()
	d.drainLive(ctx, []*gateway{live}, crash)
	if crash.clearedAt == 0 || crash.clearedAt > released {
		t.Errorf("capacity seen back at %s, the drain ended at %s: want it seen during the drain\n%s", crash.clearedAt, released, out.String())
	}
}
