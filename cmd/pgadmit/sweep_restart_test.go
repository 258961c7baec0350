package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// syncBuffer is a bytes.Buffer that a running command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// background is pgadmit running on its own goroutine (a sweeper, say) while
// the test watches what it writes.
type background struct {
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	exit           chan int
	once           sync.Once
	code           int
}

// startCLI runs pgadmit with args in the background, in a context that
// stop ends, as SIGINT or SIGTERM would; a test that ends first stops it.
func startCLI(t *testing.T, ctx context.Context, args ...string) *background {
	ctx, cancel := context.WithCancel(ctx)
	b := &background{cancel: cancel, exit: make(chan int, 1)}
	go func() { b.exit <- run(ctx, args, &b.stdout, &b.stderr, func(string) string { return "" }) }()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop interrupts the command, waits for it to exit and returns its exit
// code (the same one each time).
func (b *background) stop() int {
	b.once.Do(func() {
		b.cancel()
		b.code = <-b.exit
	})
	return b.code
}

// awaitLog waits until out matches re, at most 30s.
func awaitLog(t *testing.T, out *syncBuffer, re string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !regexp.MustCompile(re).MatchString(out.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pgadmit never wrote %s within 30s:\n%s", re, out.String())
		}
	}
}

// The sweeper outlives a restart of its database: while the server is down each pass logs its
// failure on one line, and once it is back the passes work again, on the same pool.
func TestRecoverSweeperOutlivesADatabaseRestart(t *testing.T) {
	t.Parallel()
	c := pgtest.OwnCluster(t)
	url := c.URL()
	if _, errOut, code := cli(t, nil, "--database-url", url, "migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: exit %d, %s", code, errOut)
	}
	sweeper := startCLI(t, context.Background(), "--database-url", url, "--connect-timeout", "500ms", "recover", "--every", "100ms")
	stdout := &sweeper.stdout
	awaitLog(t, stdout, `recover: nothing to recover`)
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, stdout, `(?s)pass failed.*pass failed.*pass failed`)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	mark := len(stdout.String())
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String()[mark:], "nothing to recover"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper never recovered after the restart:\n%s", stdout.String())
		}
	}
	if code := sweeper.stop(); code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("exit %d, stderr %q", code, sweeper.stderr.String())
	}
}

// A restart of the database in the middle of a pass leaves the pass's recover lease behind: the
// pass could not give it up. The sweeper's next pass takes its own lease back and does the work,
// instead of logging, until the lease expires, that another process is recovering when none is.
func TestRecoverSweeperTakesBackTheLeaseARestartLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtest.OwnCluster(t, pgcluster.OnDisk()) // the lease the pass took outlives the crash
	url := c.URL()
	if _, errOut, code := cli(t, nil, "--database-url", url, "migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: exit %d, %s", code, errOut)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the counters' transaction ends
	lim := ratelimit.New(pool)
	task, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "gw-test", LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Reserve(ctx, task.ID, task.AttemptID, []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "k"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Hour},
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the execution lease expires
	lockCounters(t, pool)               // the pass stalls on the counter, its lease held

	sweeper := startCLI(t, ctx, "--database-url", url, "--connect-timeout", "500ms", "recover", "--every", "100ms")
	pgtest.AwaitLockWaiters(t, pool, "recover's pass, on the locked counter,")
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, &sweeper.stdout, `failed 1 attempt|skipped`)
	if code := sweeper.stop(); code != exitOK || sweeper.stderr.String() != "" {
		t.Fatalf("exit %d, stderr %q", code, sweeper.stderr.String())
	}
	out := sweeper.stdout.String()
	if strings.Contains(out, "skipped") || !strings.Contains(out, "failed 1 attempt") {
		t.Errorf("after the restart, want the sweeper to recover at once, not to skip for its own lease:\n%s", out)
	}
}
