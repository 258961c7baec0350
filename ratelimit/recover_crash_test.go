package ratelimit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// crashChildEnv carries the database URL to the re-executed test binary;
// its presence makes TestRecoverCrashChild act as the crashing gateway.
const crashChildEnv = "PGADMIT_CRASH_CHILD_DATABASE_URL"

// crashChildApp is the application_name of the child's sessions.
const crashChildApp = "pgadmit-crashchild"

// crashReady is what the child reports once its fixed script is done, just
// before it idles (heartbeating one task) until it is killed.
type crashReady struct {
	// LeasesEnd is the latest expiry of every execution and concurrency
	// lease the script took (the heartbeated task's lease moves on).
	LeasesEnd   time.Time
	HeartbeatID string
}

// The child's fixed script, shared with the parent's expectations.
const (
	crashAsyncTasks   = 12
	crashClaimed      = 8
	crashSyncTasks    = 3 // plus the heartbeated one
	crashLeaseTTL     = 2 * time.Second
	crashTokensBudget = 500
)

func crashLimits() []ratelimit.Limit {
	c := concurrent("model", "crash", 100)
	c.LeaseTTL = crashLeaseTTL
	return []ratelimit.Limit{
		window("api_key", "crash", ratelimit.MetricRequests, 1000, 1),
		window("api_key", "crash", ratelimit.MetricTokens, 1e6, crashTokensBudget),
		c,
	}
}

// TestRecoverCrashChild is the gateway that dies. It does nothing unless
// TestRecoverAfterSIGKILL re-executes the test binary with crashChildEnv
// set (the standard helper-process pattern); then it runs a fixed script
// that leaves tasks running, reservations open, leases held, a transaction
// open mid-admission and a heartbeat in flight, reports on stdout, and
// waits to be killed.
func TestRecoverCrashChild(t *testing.T) {
	url := os.Getenv(crashChildEnv)
	if url == "" {
		return
	}
	ctx := context.Background()
	say := func(format string, args ...any) { fmt.Printf("crashchild "+format+"\n", args...) }
	must := func(step string, err error) {
		if err != nil {
			say("error %s: %v", step, err)
			t.Fatalf("%s: %v", step, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	must("parse url", err)
	cfg.ConnConfig.RuntimeParams["application_name"] = crashChildApp
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	must("connect", err)
	l := ratelimit.New(pool)
	queue := []ratelimit.Limit{queueLimit("crash", 100)}
	var end time.Time
	note := func(ts ...time.Time) { end = latest(append(ts, end)...) }

	for range crashAsyncTasks {
		_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "crash", QueueLimits: queue})
		must("create async", err)
	}
	say("step created %d async tasks", crashAsyncTasks)
	var running []ratelimit.Task
	for range crashClaimed {
		task, err := l.ClaimTask(ctx, "crashchild", crashLeaseTTL)
		must("claim", err)
		running = append(running, task)
	}
	say("step claimed %d", crashClaimed)
	for range crashSyncTasks {
		task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "crash", Worker: "crashchild", LeaseTTL: crashLeaseTTL, QueueLimits: queue})
		must("create sync", err)
		running = append(running, task)
	}
	say("step started %d sync tasks", crashSyncTasks)
	grants := make([]ratelimit.Grant, len(running))
	for i, task := range running {
		grants[i], err = l.Reserve(ctx, task.ID, task.AttemptID, crashLimits())
		must("reserve", err)
		note(task.LeaseExpiresAt, grants[i].Leases[0].ExpiresAt)
	}
	say("step reserved for %d running tasks", len(running))

	// async 0-2: done properly; async 3: committed, died before finishing;
	// async 4: failed without committing; sync 0 (running[8]): committed,
	// died before finishing; the rest die holding everything.
	for i := range 3 {
		_, err := l.Commit(ctx, grants[i], map[string]float64{ratelimit.MetricTokens: 321})
		must("commit", err)
		_, err = l.FinishTask(ctx, running[i].ID, running[i].ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		must("finish", err)
	}
	_, err = l.Commit(ctx, grants[3], map[string]float64{ratelimit.MetricTokens: 123})
	must("commit", err)
	_, err = l.FinishTask(ctx, running[4].ID, running[4].ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "upstream_error"})
	must("finish failed", err)
	_, err = l.Commit(ctx, grants[crashClaimed], map[string]float64{ratelimit.MetricTokens: 200})
	must("commit sync", err)
	say("step settled 5 grants, finished 4 tasks")

	// Mid-admission: a transaction that reserved and created a task, never
	// committed; it holds the counter rows of api_key:crash when it dies.
	tx, err := pool.Begin(ctx)
	must("begin", err)
	inTx := l.WithTx(tx)
	_, err = inTx.Reserve(ctx, running[5].ID, "", crashLimits()[:2])
	must("reserve in tx", err)
	// (Its own queue: the transaction holds that queue's advisory lock.)
	_, err = inTx.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{queueLimit("crash-tx", 100)}})
	must("create in tx", err)
	say("step transaction open mid-admission")

	// Mid-flight: a sync task heartbeated and logging progress until death.
	hb, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "crash", Worker: "crashchild", LeaseTTL: crashLeaseTTL, QueueLimits: queue})
	must("create heartbeated", err)
	ready, _ := json.Marshal(crashReady{LeasesEnd: end, HeartbeatID: hb.ID})
	say("ready %s", ready)
	go func() {
		for i := 0; ; i++ {
			until, err := l.HeartbeatTask(ctx, hb.ID, hb.ExecutionToken, crashLeaseTTL)
			if err == nil {
				_, err = l.AppendEvent(ctx, hb.ID, hb.ExecutionToken, ratelimit.Event{Type: "task.progress", Progress: float64(i)})
			}
			if err != nil {
				say("error heartbeat: %v", err)
				os.Exit(4)
			}
			say("heartbeat %d until %s", i, until.Format(time.RFC3339Nano))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Idle until killed; if the parent dies first, its end of stdin closes.
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(3)
}

// TestRecoverAfterSIGKILL runs TestRecoverCrashChild in a child process,
// kills it with SIGKILL mid-flight, waits for its leases to expire on the
// database's clock, and checks that one Recover gives every unit back.
func TestRecoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer pool.Close()
	l := ratelimit.New(pool)

	child := exec.Command(os.Args[0], "-test.run=^TestRecoverCrashChild$", "-test.count=1", "-test.timeout=5m")
	child.Env = append(os.Environ(), crashChildEnv+"="+url)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatalf("stdin: %v", err)
	}
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout: %v", err)
	}
	var stderr strings.Builder
	child.Stderr = &stderr
	started := time.Now()
	if err := child.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	var ready crashReady
	heartbeats := 0
	timeout := time.After(time.Minute)
	for heartbeats < 3 {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = child.Wait()
				t.Fatalf("child ended before the kill; stderr:\n%s", stderr.String())
			}
			switch {
			case strings.HasPrefix(line, "crashchild ready "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "crashchild ready ")), &ready); err != nil {
					t.Fatalf("ready line %q: %v", line, err)
				}
			case strings.HasPrefix(line, "crashchild heartbeat "):
				heartbeats++
			case strings.HasPrefix(line, "crashchild error "):
				t.Fatalf("child: %s", line)
			}
			t.Logf("%s", line)
		case <-timeout:
			_ = child.Process.Kill()
			t.Fatalf("child never got mid-flight; stderr:\n%s", stderr.String())
		}
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatalf("kill: %v", err)
	}
	werr := child.Wait()
	if status, ok := child.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !status.Signaled() {
		t.Fatalf("child was not killed by a signal: %v", werr)
	}
	for range lines { // drain
	}
	t.Logf("child killed with SIGKILL after %s, mid-heartbeat", time.Since(started).Round(time.Millisecond))
	// The server ends the dead child's sessions (rolling back its open
	// transaction) when it notices the closed sockets; a statement in flight
	// may still commit until then.
	if !awaitNoSessions(t, pool, crashChildApp) {
		t.FailNow()
	}

	// What the dead process holds, once the heartbeated lease is known: it
	// can no longer move.
	hb := getTask(t, l, ready.HeartbeatID)
	waitPast(t, pool, latest(ready.LeasesEnd, hb.LeaseExpiresAt))
	waitedUntil := time.Now()
	atDeath := summary(t, pool)
	wantAtDeath := dbtest.OpsStateSummaryRow{
		TasksQueued:      crashAsyncTasks - crashClaimed,
		TasksRunning:     crashClaimed - 4 + crashSyncTasks + 1, // async 3,5,6,7; sync 0-2; heartbeated
		TasksSucceeded:   3,
		TasksFailed:      1,
		AttemptsRunning:  crashClaimed - 4 + crashSyncTasks + 1,
		Admissions:       crashAsyncTasks + crashSyncTasks + 1 - 4,
		ReservationsOpen: 2 * 5, // async 5,6,7 and sync 1,2; the transaction's never existed
		// async 0-2, async 3, sync 0 committed; async 4's released by FinishTask
		ReservationsCommitted: 2 * 5,
		ReservationsReleased:  2,
		LeasesUnreleased:      5, // expired by now, never released
		CountersReserved:      5 * (1 + crashTokensBudget),
		CountersUsed:          5 + 3*321 + 123 + 200,
	}
	if diff := cmp.Diff(wantAtDeath, atDeath); diff != "" {
		t.Fatalf("state left by the dead process (-want +got):\n%s", diff)
	}

	recoverStarted := time.Now()
	m := ratelimit.NewMaintenance(pool)
	got, err := m.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	recoverTook := time.Since(recoverStarted)
	want := ratelimit.RecoveryResult{
		ReleasedConcurrencyLeases: 5,
		ReleasedRateReservations:  10,
		FailedAttempts:            8,
		FailedTasks:               4, // sync 0-2 and the heartbeated one: server_restarted
		RequeuedAsyncTasks:        4, // async 3,5,6,7
		CleanedTaskAdmissions:     4, // the failed sync tasks'; requeued tasks keep theirs
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Recover after the crash (-want +got):\n%s", diff)
	}
	t.Logf("Recover after SIGKILL (took %s): %s", recoverTook.Round(time.Microsecond), got)

	after := summary(t, pool)
	wantAfter := dbtest.OpsStateSummaryRow{
		TasksQueued:           crashAsyncTasks - crashClaimed + 4,
		TasksSucceeded:        3,
		TasksFailed:           1 + 4,
		Admissions:            crashAsyncTasks - 4, // one per queued task, none of a finished one
		ReservationsCommitted: 10,
		ReservationsReleased:  12,
		CountersUsed:          5 + 3*321 + 123 + 200,
	}
	if diff := cmp.Diff(wantAfter, after); diff != "" {
		t.Fatalf("state after recovery (-want +got):\n%s", diff)
	}
	totals, err := testq.OpsUsedByScopeMetric(ctx, pool)
	if err != nil {
		t.Fatalf("OpsUsedByScopeMetric: %v", err)
	}
	wantTotals := []dbtest.OpsUsedByScopeMetricRow{
		{ScopeType: "api_key", ScopeKey: "crash", Metric: ratelimit.MetricRequests, UsedValue: 5},
		{ScopeType: "api_key", ScopeKey: "crash", Metric: ratelimit.MetricTokens, UsedValue: 3*321 + 123 + 200},
	}
	if diff := cmp.Diff(wantTotals, totals); diff != "" {
		t.Fatalf("counters: used must equal committed usage, nothing reserved (-want +got):\n%s", diff)
	}
	if hbAfter := getTask(t, l, hb.ID); hbAfter.Status != ratelimit.TaskFailed || hbAfter.ErrorCode != ratelimit.ErrorCodeServerRestarted {
		t.Fatalf("heartbeated task after recovery = %+v", hbAfter)
	}
	assertDoctorOK(t, pool)
	recoverOnce(t, m, ratelimit.RecoveryResult{})
	t.Logf("crash test: at death %d running tasks, %d open reservations (%g reserved), %d unreleased leases, %d admissions; "+
		"after Recover: 0 running, 0 open, 0 reserved, used %g, %d admissions (all of queued tasks); waited %s for leases to expire",
		atDeath.TasksRunning, atDeath.ReservationsOpen, atDeath.CountersReserved, atDeath.LeasesUnreleased, atDeath.Admissions,
		after.CountersUsed, after.Admissions, waitedUntil.Sub(started).Round(time.Millisecond))
}
