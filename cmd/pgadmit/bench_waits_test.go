package main

import (
	"context"
	"encoding/json"
	"math"
	neturl "net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func TestClassifyWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		state, typ, event string
		class             waitClass
		executing         bool
	}{
		{"active", "", "", waitRunning, true},
		{"active", "IO", "WALSync", waitWALIO, true},
		{"active", "IO", "WALWrite", waitWALIO, true},
		{"active", "IO", "WALInitSync", waitWALIO, true},
		{"active", "LWLock", "WALWrite", waitWALLock, true},
		{"active", "LWLock", "WALInsert", waitWALLock, true},
		{"active", "Lock", "transactionid", waitLock, true},
		{"active", "Lock", "advisory", waitLock, true},
		{"active", "IO", "DataFileRead", waitOther, true},
		{"active", "LWLock", "BufferContent", waitOther, true},
		{"idle", "Client", "ClientRead", 0, false},
		{"idle in transaction", "Client", "ClientRead", 0, false},
		{"", "", "", 0, false},
	} {
		class, executing := classifyWait(db.BenchSessionActivityRow{State: c.state, WaitEventType: c.typ, WaitEvent: c.event})
		if executing != c.executing || (executing && class != c.class) {
			t.Errorf("classifyWait(%q, %q:%q) = %v, %v; want %v, %v", c.state, c.typ, c.event, class, executing, c.class, c.executing)
		}
	}
}

func TestWaitTallyReport(t *testing.T) {
	t.Parallel()
	var tally waitTally
	running := db.BenchSessionActivityRow{State: "active"}
	flushing := db.BenchSessionActivityRow{State: "active", WaitEventType: "IO", WaitEvent: "WALSync"}
	queued := db.BenchSessionActivityRow{State: "active", WaitEventType: "LWLock", WaitEvent: "WALWrite"}
	idle := db.BenchSessionActivityRow{State: "idle", WaitEventType: "Client", WaitEvent: "ClientRead"}
	tally.add([]db.BenchSessionActivityRow{running, flushing, idle})
	tally.add([]db.BenchSessionActivityRow{running, idle, queued})
	tally.add(nil)
	tally.add([]db.BenchSessionActivityRow{running, running, flushing, flushing})
	got := tally.report("W")
	want := workloadWaitsJSON{Workload: "W", Samples: 4, InFlight: 8.0 / 4, RunningPct: 100 * 4.0 / 8,
		WALPct: 100*3.0/8 + 100*1.0/8, WALIOPct: 100 * 3.0 / 8, WALLockPct: 100 * 1.0 / 8}
	if got != want {
		t.Errorf("report = %+v, want %+v", got, want)
	}
	if empty := (waitTally{}).report("none"); empty != (workloadWaitsJSON{Workload: "none"}) {
		t.Errorf("report of no samples = %+v", empty)
	}
}

// A Reserve that waits for a counter row another transaction holds is seen executing, all of
// its time in a lock wait.
func TestWaitsSeeAReserveWaitingForARow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	open := func(url, application string, params map[string]string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = application
		for name, value := range params {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	// A lock waiter wakes once, deadlock_timeout (1 s by default) into its wait, to look for a
	// deadlock: for that moment it runs, with no wait event, and a sample there once saw it
	// so. The waiter's role is a superuser, who may put that moment past the test's end (and
	// whose sessions only another superuser sees the waits of).
	adminURL := pgtest.AdminURL(t, url)
	waiter := open(adminURL, "waits-test", map[string]string{"deadlock_timeout": "1h"})
	holder, admin := open(url, "waits-holder", nil), open(adminURL, "waits-admin", nil)
	// A week's window: the two Reserves must fall in the same window, which a
	// one-minute window breaks when the test runs across a minute's end.
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "held"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1,
		Window: 7 * 24 * time.Hour}}

	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := ratelimit.New(holder).WithTx(tx).Reserve(ctx, "", "", limits); err != nil {
		t.Fatalf("reserve in the holding transaction: %v", err)
	}
	reserved := make(chan error, 1)
	go func() {
		_, err := ratelimit.New(waiter).Reserve(ctx, "", "", limits)
		reserved <- err
	}()
	pgtest.AwaitLockWaiters(t, admin, "the second Reserve")

	waits, err := startWaits(ctx, admin, "waits-test")
	if err != nil {
		t.Fatal(err)
	}
	defer waits.close()
	if err := waits.beforeWorkload(ctx, bench.Workload{}, 1); err != nil {
		t.Fatal(err)
	}
	// A hundred intervals for five samples: under a loaded CI (the race detector, every package
	// at once) twenty intervals once gave four, each read of the sessions taking that long.
	time.Sleep(100 * waitsInterval)
	if err := waits.afterWorkload(ctx, bench.Result{Name: "held row"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-reserved; err != nil {
		t.Errorf("the waiting Reserve, once the row was free: %v", err)
	}

	rep := waits.report()
	if len(rep) != 1 {
		t.Fatalf("report = %+v, want one workload", rep)
	}
	got := rep[0]
	t.Logf("%+v", got)
	if got.Workload != "held row" || got.Samples < 5 || got.InFlight != 1 || got.LockPct != 100 {
		t.Errorf("report = %+v; want at least 5 samples of one statement, all waiting for a lock", got)
	}
}

// bench --waits reports, per workload, how many statements executed at once and what they did.
func TestBenchWaits(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	stdout, stderr, code := cli(t, nil, "--database-url", url, "bench", "--workers", "8", "--duration", "1s",
		"--only", "W1,W3", "--statements", "0", "--waits", "--json", "-")
	if code != exitOK {
		t.Fatalf("bench --waits: exit %d\n%s", code, stderr)
	}
	t.Logf("%s", stderr)
	var rep struct {
		Waits []workloadWaitsJSON `json:"waits"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Waits) != 2 {
		t.Fatalf("bench --waits JSON: %v\n%s", err, stdout)
	}
	for i, w := range rep.Waits {
		if code := []string{"W1", "W3"}[i]; !regexp.MustCompile(`^` + code + ` `).MatchString(w.Workload) {
			t.Errorf("waits[%d] is %q, want %s", i, w.Workload, code)
		}
		// Eight workers keep at least one statement executing most of the time, and no more
		// than their connections.
		if w.Samples < 20 || w.InFlight <= 0 || w.InFlight > 10 || w.RunningPct <= 0 {
			t.Errorf("waits %+v", w)
		}
		if sum := w.RunningPct + w.WALIOPct + w.WALLockPct + w.LockPct + w.OtherPct; math.Abs(sum-100) > 1e-9 {
			t.Errorf("%s: shares add up to %v%%", w.Workload, sum)
		}
		if math.Abs(w.WALPct-(w.WALIOPct+w.WALLockPct)) > 1e-9 {
			t.Errorf("%s: wal_pct %v is not wal_io_pct %v + wal_lock_pct %v", w.Workload, w.WALPct, w.WALIOPct, w.WALLockPct)
		}
		row := `(?m)^` + regexp.QuoteMeta(w.Workload) + `\s+\d+\.\d\d\s+\d+%\s+\d+%\s+\d+%\s+\d+%\s+\d+%\s+\d+$`
		if !regexp.MustCompile(row).MatchString(stderr) {
			t.Errorf("bench --waits table has no row for %s", w.Workload)
		}
	}
}

// The table's first column fits the longest workload name, and a workload in which no
// statement was seen executing has no shares.
func TestPrintWaits(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printWaits(&out, []workloadWaitsJSON{
		{Workload: "W6 gateway, shared model", Samples: 100, InFlight: 1.5, RunningPct: 50, WALPct: 40, WALIOPct: 30, WALLockPct: 10, LockPct: 10},
		{Workload: "W8", Samples: 100},
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	table := lines[len(lines)-3:]
	want := []string{
		"WORKLOAD                 IN FLIGHT  RUNNING  WAL I/O  WAL LOCK   LOCK  OTHER  SAMPLES",
		"W6 gateway, shared model      1.50      50%      30%       10%    10%     0%      100",
		"W8                            0.00        -        -         -      -      -      100",
	}
	if diff := cmp.Diff(want, table); diff != "" {
		t.Errorf("printWaits table (-want +got):\n%s\n%s", diff, out.String())
	}
	var none strings.Builder
	printWaits(&none, nil)
	if none.Len() != 0 {
		t.Errorf("printWaits(nil) printed %q", none.String())
	}
}

// Workloads end at any moment, often while a read of the sessions is under way: the sampler's
// connection must outlive that, for the next workload's samples.
func TestWaitsStopWhileReading(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	waits, err := startWaits(ctx, pgtest.NewPool(t), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer waits.close()
	for i := range 50 {
		if err := waits.beforeWorkload(ctx, bench.Workload{}, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%4) * 500 * time.Microsecond)
		if err := waits.afterWorkload(ctx, bench.Result{Name: "short"}); err != nil {
			t.Fatalf("workload %d: %v", i, err)
		}
	}
	if rep := waits.report(); len(rep) != 1 || rep[0].Samples == 0 || rep[0].InFlight != 0 {
		t.Errorf("report = %+v; want samples, none of them executing", rep)
	}
}

// Latencies under 10 µs keep a tenth (an admission from an allotment takes
// about one); longer ones are whole microseconds.
func TestMicros(t *testing.T) {
	for ns, want := range map[int64]string{0: "0.0", 412: "0.4", 1_460: "1.5", 9_949: "9.9", 10_000: "10", 2_003_999: "2003"} {
		if got := micros(ns); got != want {
			t.Errorf("micros(%d) = %q, want %q", ns, got, want)
		}
	}
}

// --waits samples this run's workers only: another session named "pgadmit bench" (another
// bench run on the same database, or its admin connections) executing a statement, here one
// blocked on a lock, counts for nothing in this run's report.
func TestBenchWaitsSampleThisRunsWorkersOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if err := dbtest.New().OpsLockMaintenanceLeases(ctx, holder); err != nil {
		t.Fatal(err)
	}
	other, err := pgxpool.New(ctx, url+"&application_name="+neturl.PathEscape("pgadmit bench"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	blocked := make(chan error, 1)
	go func() {
		tx, err := other.Begin(ctx)
		if err == nil {
			err = dbtest.New().OpsLockMaintenanceLeases(ctx, tx)
			tx.Rollback(ctx)
		}
		blocked <- err
	}()
	pgtest.AwaitLockWaiters(t, pool, "the other session")

	out, errOut, code := cli(t, nil, "bench", "--database-url", url, "--waits", "--only", "W1", "--workers", "1",
		"--duration", "300ms", "--statements", "0", "--json", "-")
	holder.Rollback(ctx)
	if err := <-blocked; err != nil {
		t.Errorf("the other session: %v", err)
	}
	if code != exitOK {
		t.Fatalf("bench --waits: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Waits) != 1 || rep.Waits[0].LockPct != 0 {
		t.Errorf("one worker on many keys waited for a lock: the other session was sampled: %+v\n%s", rep.Waits, errOut)
	}
}
