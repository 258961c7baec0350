package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// gatewayRequest starts a sync task on pool and admits it against a requests window (of length
// window, 0 for ratelimit.DefaultWindow) and a concurrent limit, as a gateway does before its
// upstream call.
func gatewayRequest(t *testing.T, pool *pgxpool.Pool, leaseTTL, window time.Duration) (ratelimit.Task, ratelimit.Grant) {
	t.Helper()
	ctx := context.Background()
	lim := ratelimit.New(pool)
	task, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "gw-test", LeaseTTL: leaseTTL})
	if err != nil {
		t.Fatalf("create task: %v", err)
	}
	g, err := lim.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "k1"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: window},
		{Scope: ratelimit.Scope{Type: "model", Key: "m1"}, Metric: ratelimit.MetricConcurrent, Limit: 2, Amount: 1},
	})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return task, g
}

func TestDoctorAndRecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)

	if out := cliOK(t, "--database-url", url, "doctor"); !strings.Contains(out, "the books balance") {
		t.Fatalf("doctor on an empty database:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "recover"); !strings.Contains(out, "nothing to recover") {
		t.Fatalf("recover on an empty database:\n%s", out)
	}

	// A task marked finished behind the library's back still holds its reservation, lease and
	// attempt: the doctor names them and exits 1; recover gives them back; the doctor is happy.
	task, _ := gatewayRequest(t, pool, time.Minute, 0)
	var id pgtype.UUID
	if err := id.Scan(task.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := dbtest.New().OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{Status: ratelimit.TaskSucceeded, TaskID: id}); err != nil || n != 1 {
		t.Fatalf("corrupt task status: %d rows, %v", n, err)
	}
	out, errOut, code := cli(t, nil, "--database-url", url, "doctor")
	if code != exitFailure {
		t.Fatalf("doctor on broken books: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"open_reservation_of_finished_task", "live_lease_of_finished_task", "running_attempt_of_finished_task", "pgadmit recover"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "pgadmit doctor: 3 problems found") {
		t.Errorf("doctor stderr: %q", errOut)
	}
	oneLine(t, "doctor stderr", errOut)

	out = cliOK(t, "--database-url", url, "recover")
	if !strings.Contains(out, "released 1 lease and 1 reservation; failed 1 attempt") {
		t.Errorf("recover after a corrupt finish:\n%s", out)
	}
	cliOK(t, "--database-url", url, "doctor")

	// A counter that disagrees with its ledger is not recovery's to fix.
	if _, err := dbtest.New().OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
		ReservedDelta: 3, ScopeType: "api_key", ScopeKey: "k1", Metric: ratelimit.MetricRequests,
	}); err != nil {
		t.Fatal(err)
	}
	out, _, code = cli(t, nil, "--database-url", url, "doctor")
	if code != exitFailure || !strings.Contains(out, "counter_reserved_mismatch: api_key:k1 requests") || strings.Contains(out, "pgadmit recover") {
		t.Errorf("doctor on a corrupt counter: exit %d\n%s", code, out)
	}
}

func TestRecoverDeadProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)

	// The process that ran this request died: nobody heartbeats its 1 s execution lease.
	gatewayRequest(t, pool, time.Second, 0)
	time.Sleep(1500 * time.Millisecond)

	// The sweeper finds it on its first pass, then nothing, until it is stopped:
	// stopped once it said so, not after a fixed time (under load its first pass
	// could take longer than the 1.2 s this test used to give the whole run).
	sweeper := startCLI(t, ctx, "--database-url", url, "recover", "--every", "300ms")
	awaitLog(t, &sweeper.stdout, `recover: nothing to recover`)
	code := sweeper.stop()
	out := sweeper.stdout.String()
	if code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("recover --every: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	assertSweeperLog(t, out,
		`recover: sweeping every 300ms`,
		`recover: released 1 lease and 1 reservation; failed 1 attempt; requeued 0 async tasks; failed 1 sync task and 0 poison tasks; cleaned 0 admissions; returned 0 lost allotments \(\d+(\.\d+)?m?s\)$`,
		`recover: nothing to recover \(\d+(\.\d+)?m?s\)$`,
		`recover: stopped$`,
	)
	cliOK(t, "--database-url", url, "doctor")
	if out := cliOK(t, "--database-url", url, "inspect", "--scope", "model:m1"); !strings.Contains(out, "CONCURRENCY LEASES (unreleased)\n  none") {
		t.Errorf("the dead process's lease is still there:\n%s", out)
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	task, g := gatewayRequest(t, pool, time.Minute, 0)
	lim := ratelimit.New(pool)
	if _, err := lim.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.FinishTask(ctx, task.ID, task.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}
	// Nothing ended a day ago, no task finished a week ago; with a 1 s cutoff the released lease
	// goes, the current window and its reservation stay (the window has not ended); the finished
	// task's two events go, and then, with a 1 s task retention, the task itself.
	out := cliOK(t, "--database-url", url, "prune")
	if !regexp.MustCompile(`^pruned before \S+: released 0 stale reservations; deleted 0 counter windows, 0 reservations, 0 allotments, 0 leases, 0 events, 0 tasks finished before \S+ \(\d+(\.\d+)?m?s\)\n$`).MatchString(out) {
		t.Errorf("prune:\n%s", out)
	}
	time.Sleep(1100 * time.Millisecond)
	out = cliOK(t, "--database-url", url, "prune", "--older-than", "1s", "--events", "--batch-size", "1", "--task-retention", "0")
	// (The minute's window and its committed reservation go too if the minute has ended.)
	if !regexp.MustCompile(`: released 0 stale reservations; deleted [01] counter windows?, [01] reservations?, 0 allotments, 1 lease, 2 events, finished tasks kept`).MatchString(out) {
		t.Errorf("prune --older-than 1s --events --task-retention 0:\n%s", out)
	}
	out = cliOK(t, "--database-url", url, "prune", "--older-than", "1s", "--task-retention", "1s")
	if !regexp.MustCompile(`: released 0 stale reservations; deleted [01] counter windows?, [01] reservations?, 0 allotments, 0 leases, 0 events, 1 task finished before`).MatchString(out) {
		t.Errorf("prune --older-than 1s --task-retention 1s:\n%s", out)
	}
	cliOK(t, "--database-url", url, "doctor")
	_, errOut, code := cli(t, nil, "--database-url", url, "prune", "--task-retention", "-1s")
	if code != exitUsage || !strings.Contains(errOut, "--task-retention must be >= 0") {
		t.Errorf("prune --task-retention -1s: exit %d, %q", code, errOut)
	}

	_, errOut, code = cli(t, nil, "--database-url", url, "prune", "--older-than", "0s")
	if code != exitUsage || !strings.Contains(errOut, "--older-than must be positive") {
		t.Errorf("prune --older-than 0s: exit %d, %q", code, errOut)
	}
}

// seedMaintenanceWork leaves, for each key, work for recover and prune: a finished task that still
// holds a reservation (on key-task) and a reservation nobody settles (on key-stale), each of a
// 1 s window limit of 10 taking 2.
func seedMaintenanceWork(t *testing.T, pool *pgxpool.Pool, keys ...string) {
	t.Helper()
	ctx := context.Background()
	lim := ratelimit.New(pool)
	defer lim.Close()
	second := func(key string) []ratelimit.Limit {
		return []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 2, Window: time.Second}}
	}
	for _, key := range keys {
		task, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "gw-test", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Reserve(ctx, task.ID, task.AttemptID, second(key+"-task")); err != nil {
			t.Fatal(err)
		}
		var id pgtype.UUID
		if err := id.Scan(task.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := dbtest.New().OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{Status: ratelimit.TaskSucceeded, TaskID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Reserve(ctx, "", "", second(key+"-stale")); err != nil {
			t.Fatal(err)
		}
	}
}

// A reservation on a counter damaged by hand (the server rejects its release) leaves recover
// and prune exiting 1 with the server's reason, but they still did the rest of their work and
// say what: they used to print the error alone.
func TestRecoverAndPruneSayWhatTheyDidPastARejectedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	q := dbtest.New()
	seedMaintenanceWork(t, pool, "good", "bad")
	// The bad counters hold less than their reservations: releasing one would go negative.
	for _, key := range []string{"bad-task", "bad-stale"} {
		if _, err := q.OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
			ReservedDelta: -1, ScopeType: "api_key", ScopeKey: key, Metric: ratelimit.MetricRequests,
		}); err != nil {
			t.Fatal(err)
		}
	}

	out, errOut, code := cli(t, nil, "--database-url", url, "recover")
	if code != exitFailure || !strings.Contains(errOut, "check constraint") {
		t.Errorf("recover: exit %d, stderr %q: want 1 and the server's reason", code, errOut)
	}
	if !strings.Contains(out, "released 0 leases and 1 reservation; failed 2 attempts") {
		t.Errorf("recover printed %q, want what it did: the good reservation released", out)
	}

	time.Sleep(2100 * time.Millisecond) // the 1 s windows end, and a cutoff of 1 s passes them
	out, errOut, code = cli(t, nil, "--database-url", url, "prune", "--older-than", "1s")
	if code != exitFailure || !strings.Contains(errOut, "release stale reservations") {
		t.Errorf("prune: exit %d, stderr %q: want 1 and the step that failed", code, errOut)
	}
	if !strings.Contains(out, ": released 1 stale reservation; deleted 2 counter windows, 2 reservations") {
		t.Errorf("prune printed %q, want what it did: the good window pruned", out)
	}
}

// A sweeper pass that hangs (here, every query of it waits for a lock held by another
// transaction) is cut off after --pass-timeout and logged as failed, naming the bound (it used
// to say only "context deadline exceeded"), and the sweeper goes on: once the lock goes, its
// next pass runs. It used to wait for ever.
func TestRecoverSweeperCutsOffAPassThatHangs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := dbtest.New().OpsLockMaintenanceLeases(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// The lock goes once a pass was cut off, and the sweeper stops once a pass ran: on what it
	// logs, not at fixed times (under load its first pass could start after the 1.5 s this test
	// used to hold the lock, or the next one end after the 3 s it gave the whole run).
	sweeper := startCLI(t, ctx, "--database-url", url, "recover", "--every", "200ms", "--pass-timeout", "500ms")
	awaitLog(t, &sweeper.stdout, `recover: pass failed: cut off by --pass-timeout \(500ms\): .*context deadline exceeded`)
	_ = tx.Rollback(ctx) // the lock goes
	awaitLog(t, &sweeper.stdout, `recover: nothing to recover`)
	code := sweeper.stop()
	out := sweeper.stdout.String()
	if code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("recover --every: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	assertSweeperLog(t, out,
		`recover: pass failed: cut off by --pass-timeout \(500ms\): .*context deadline exceeded`,
		`recover: nothing to recover \(\d+(\.\d+)?m?s\)$`,
		`recover: stopped$`,
	)
	_, errOut, code := cli(t, nil, "--database-url", url, "recover", "--every", "1s", "--pass-timeout", "0s")
	if code != exitUsage || !strings.Contains(errOut, "--pass-timeout must be at least 100ms, got 0s") {
		t.Errorf("recover --pass-timeout 0s: exit %d, %q", code, errOut)
	}
}

// The sweeper started while its database cannot be reached logs it, without the password, and
// tries again at each interval until stopped; it used to exit 1 at once.
func TestRecoverSweeperWaitsForItsDatabase(t *testing.T) {
	t.Parallel()
	// Stopped once it tried twice, not after a fixed time: under load two tries could take
	// longer than the 1.2 s this test used to give the whole run.
	sweeper := startCLI(t, context.Background(), "--database-url", "postgres://u:hunter2@127.0.0.1:1/db", "--connect-timeout", "200ms",
		"recover", "--every", "300ms")
	awaitLog(t, &sweeper.stdout, `(?s)trying again in 300ms.*trying again in 300ms`)
	code := sweeper.stop()
	out := sweeper.stdout.String()
	if code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("recover --every on an unreachable database: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ `
	tries := regexp.MustCompile(`(?m)^`+ts+`recover: cannot connect to postgres://u:xxxxx@127\.0\.0\.1:1/db: .*; trying again in 300ms$`).FindAllString(out, -1)
	if len(tries) < 2 || !regexp.MustCompile(`(?m)^`+ts+`recover: stopped$`).MatchString(out) {
		t.Errorf("recover --every output, want two tries or more and a stop:\n%s", out)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("the password is printed:\n%s", out)
	}
}

// The sweeper names its interval as the operator wrote it (--every 1m: "every 1m", not Go's
// "1m0s"), in its first line and in each retry.
func TestRecoverSweeperWritesItsIntervalAsGiven(t *testing.T) {
	t.Parallel()
	sweeper := startCLI(t, context.Background(), "--database-url", "postgres://u@127.0.0.1:1/db", "recover", "--every", "1m")
	awaitLog(t, &sweeper.stdout, `trying again in`)
	if code := sweeper.stop(); code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("recover --every 1m: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	out := sweeper.stdout.String()
	for _, want := range []string{"recover: sweeping every 1m (stop with Ctrl-C or SIGTERM)\n", "; trying again in 1m\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --every 1m output lacks %q:\n%s", want, out)
		}
	}
}

// A sweeper stopped in the middle of a pass says what that pass did before it stopped: the
// capacity it gave back is real. It used to log only "stopped", and the work went unreported;
// and then 0 for the steps the pass never reached.
func TestRecoverSweeperStoppedMidPassSaysWhatItDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	lim := ratelimit.New(pool)
	// Two requests of dead processes, on two keys; the first one's lease expires first, so a
	// pass with a batch of one reclaims it first.
	for _, key := range []string{"first", "second"} {
		task, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "gw-test", LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
			{Scope: ratelimit.Scope{Type: "api_key", Key: key}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The second key's counter is locked: the pass stalls there, after the first reclaim.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := dbtest.New()
	if n, err := q.OpsLockScopeCounters(ctx, tx, dbtest.OpsLockScopeCountersParams{ScopeType: "api_key", ScopeKey: "second"}); err != nil || n != 1 {
		t.Fatalf("lock the second counter: %d rows, %v", n, err)
	}
	time.Sleep(1100 * time.Millisecond) // both execution leases expire

	sweeper := startCLI(t, ctx, "--database-url", url, "recover", "--every", "1m", "--batch-size", "1")
	pgtest.AwaitLockWaiters(t, pool, "recover's pass, on the locked counter,")
	code := sweeper.stop() // SIGINT
	out := sweeper.stdout.String()
	if code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("recover --every: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	assertSweeperLog(t, out,
		// Stopped in its first step: the counts that only that step or those it did not reach
		// feed, and that stayed 0, are not said as if they ran and found nothing.
		`recover: released 1 reservation; failed 1 attempt; failed 1 sync task; failed steps: reclaim expired tasks; `+
			`not run: the 8 steps after reclaim expired tasks \(\d+(\.\d+)?m?s\); stopped mid-pass$`,
		`recover: stopped$`,
	)
	if strings.Contains(out, "pass failed") {
		t.Errorf("a pass stopped by the signal is logged as failed:\n%s", out)
	}
	// The pass gave its lease up on its way out: the next sweeper need not wait for it.
	if leases, err := q.MaintenanceLeaseList(ctx, pool); err != nil || len(leases) != 0 {
		t.Errorf("maintenance leases after the stop: %+v, %v; want none", leases, err)
	}
}

// A long prune or recover says how far it has got, on stderr, while it runs (--progress; here
// after every batch); the result still goes to stdout alone. A negative interval, or one given to
// the sweeper, whose passes are each logged, is a usage error.
func TestPruneAndRecoverPrintTheirProgress(t *testing.T) {
	t.Parallel()
	url, _ := newDatabase(t)
	for _, c := range []struct{ cmd, result, summary string }{
		{"prune", `^pruned before \S+: released 0 stale reservations; .* \(\d+(\.\d+)?m?s\)\n$`, `pruned before \S+: released 0 stale reservations; `},
		{"recover", `^nothing to recover \(\d+(\.\d+)?m?s\)\n$`, `released 0 leases and 0 reservations; `},
	} {
		out, errOut, code := cli(t, nil, "--database-url", url, c.cmd, "--progress", "1ns")
		if code != exitOK || !regexp.MustCompile(c.result).MatchString(out) {
			t.Errorf("%s --progress 1ns: exit %d, stdout:\n%s", c.cmd, code, out)
		}
		// "1 batch", "2 batches": the first line said "1 batches".
		line := regexp.MustCompile(`^pgadmit ` + c.cmd + `: so far \(\d+s, (\d+) batch(es)?, now at "[a-z ]+"\): ` + c.summary)
		// A batch that takes longer than 100ms, the floor of the line that says a run still
		// waits for one (TestRecoverAndPruneSayTheyAreStillWaiting), may add that line.
		var lines []string
		for _, l := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
			if !regexp.MustCompile(`^` + stillWaiting + `$`).MatchString(l + "\n") {
				lines = append(lines, l)
			}
		}
		if len(lines) < 6 {
			t.Errorf("%s --progress 1ns: %d progress lines, want one per batch:\n%s", c.cmd, len(lines), errOut)
		}
		for i, l := range lines {
			m := line.FindStringSubmatch(l)
			if m == nil || m[1] != strconv.Itoa(i+1) || (m[2] == "") != (i == 0) {
				t.Errorf("%s progress line %d does not match %s:\n%s", c.cmd, i+1, line, l)
			}
		}
	}
	for _, args := range [][]string{{"prune", "--progress", "-1s"}, {"recover", "--progress", "-1s"}, {"recover", "--every", "1s", "--progress", "5s"}} {
		_, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "--progress") {
			t.Errorf("%v: exit %d, %q; want a usage error naming --progress", args, code, errOut)
		}
	}
}

// recover --help says, at --progress, that --every refuses it (the usage error of
// TestPruneAndRecoverPrintTheirProgress); the commands without --every say nothing of it there.
func TestRecoverHelpSaysProgressIsRefusedWithEvery(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"recover", "prune", "doctor", "bench"} {
		_, after, ok := strings.Cut(cliOK(t, cmd, "--help"), "\n  --progress interval\n")
		if !ok {
			t.Errorf("pgadmit %s --help has no --progress", cmd)
			continue
		}
		usage, _, _ := strings.Cut(after, "\n")
		if says := strings.Contains(usage, "refused with --every"); says != (cmd == "recover") {
			t.Errorf("pgadmit %s --help of --progress: %q; saying it is refused with --every: %t, want %t", cmd, usage, says, cmd == "recover")
		}
	}
}

// assertSweeperLog checks that the sweeper's output has a line for each pattern, after its UTC
// timestamp.
func assertSweeperLog(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, line := range lines {
		re := `(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ` + line
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("recover --every output does not match %s:\n%s", re, out)
		}
	}
}
