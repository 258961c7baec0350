package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// startBench runs pgadmit bench with args on url in the background until ctx ends (a Ctrl-C),
// and returns its output streams and a channel that receives its exit code.
func startBench(ctx context.Context, url string, args ...string) (stdout, stderr *syncBuffer, exited chan int) {
	stdout, stderr, exited = &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	a := newApp(stdout, stderr, func(string) string { return "" })
	go func() {
		exited <- runApp(ctx, a, append([]string{"--database-url", url, "bench", "--statements", "0", "--progress", "0"}, args...))
	}()
	return stdout, stderr, exited
}

// dbHolds is what a database's limits hold, as inspect reads it.
type dbHolds struct {
	leases   int64   // unreleased concurrency leases, live or expired
	reserved float64 // reserved value of the windows that have not ended
	blocks   int64   // open allotment blocks
	queued   int64   // queue places (queue_size admissions) of unfinished tasks
}

// holdsOf reads what pool's database holds.
func holdsOf(t *testing.T, pool *pgxpool.Pool) dbHolds {
	t.Helper()
	ctx := context.Background()
	q := db.New()
	var h dbHolds
	windows, err := q.InspectWindows(ctx, pool, db.InspectWindowsParams{MaxRows: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range windows {
		reserved, err := strconv.ParseFloat(w.ReservedValue, 64) // numeric's text
		if err != nil {
			t.Fatal(err)
		}
		h.reserved += reserved
	}
	leases, err := q.InspectLeases(ctx, pool, db.InspectLeasesParams{MaxRows: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		h.leases += l.LiveLeases + l.ExpiredLeases
	}
	allots, err := q.InspectAllotments(ctx, pool, db.InspectAllotmentsParams{MaxRows: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allots {
		h.blocks += a.Blocks
	}
	admissions, err := q.InspectAdmissions(ctx, pool, db.InspectAdmissionsParams{MaxRows: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range admissions {
		h.queued += a.Admitted
	}
	return h
}

// awaitHolds waits until what pool's database holds satisfies ok, at most 30s.
func awaitHolds(t *testing.T, pool *pgxpool.Pool, what string, stderr *syncBuffer, ok func(dbHolds) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h := holdsOf(t, pool)
		if ok(h) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database never held %s within 30s: %+v; stderr:\n%s", what, h, stderr.String())
		}
	}
}

// awaitInterrupted waits for pgadmit cmd (bench, demo) to exit after its Ctrl-C, and requires
// it to say that it was interrupted and exit 1.
func awaitInterrupted(t *testing.T, stdout, stderr *syncBuffer, exited chan int, cmd string) {
	t.Helper()
	select {
	case code := <-exited:
		if code != exitFailure || stderr.String() != "pgadmit "+cmd+": interrupted\n" {
			t.Errorf("%s interrupted: exit %d, stderr %q; want exit 1, interrupted\nstdout:\n%s", cmd, code, stderr.String(), stdout.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of Ctrl-C; stderr %q", cmd, stderr.String())
	}
}

// A Ctrl-C gives back what the workers hold before bench exits: the grants of the workers in
// their --think pause (W7's reservations, its leases and its Local admissions), W4's admissions
// (held on purpose until its checks have read them), the blocks of W7's Limiters, and T1's
// tasks, which it finishes. Nothing stays open in the database: no lease until its TTL, no
// reservation or block until its window ends, no task (nor its queue place) until Recover.
func TestBenchInterruptedLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		args  []string
		while string // what the database holds when the interrupt comes
		ready func(dbHolds) bool
	}{
		{"W7 in --think", []string{"--only", "W7", "--workers", "4", "--think", "20s", "--duration", "1m"},
			"the 4 workers' leases and a block", func(h dbHolds) bool { return h.leases == 4 && h.blocks > 0 }},
		{"W4", []string{"--only", "W4", "--workers", "4"},
			"W4's 10 leases", func(h dbHolds) bool { return h.leases == 10 }},
		{"T1 in --think", []string{"--only", "T1", "--workers", "4", "--think", "20s", "--duration", "1m"},
			"the 4 workers' tasks and leases", func(h dbHolds) bool { return h.queued == 4 && h.leases == 4 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			ctx, interrupt := context.WithCancel(context.Background())
			defer interrupt()
			stdout, stderr, exited := startBench(ctx, url, c.args...)
			awaitHolds(t, pool, c.while, stderr, c.ready)
			interrupt()
			awaitInterrupted(t, stdout, stderr, exited, "bench")
			if h := holdsOf(t, pool); h != (dbHolds{}) {
				t.Errorf("bench %v interrupted while its database held %s left %+v held, want nothing", c.args, c.while, h)
			}
		})
	}
}
