package ratelimit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// procChildEnv carries the child's orders (JSON) to the re-executed test
// binary; its presence makes TestProcessChild act as one gateway process.
const procChildEnv = "PGADMIT_PROCESS_CHILD"

// procOrders is what a child gateway process runs.
type procOrders struct {
	URL     string
	Key     string
	Local   bool          // the window limit is Local (allotments); else combining only
	Window  time.Duration // of the window limit
	Limit   float64       // of the window limit
	Slots   float64       // the concurrent limit
	Workers int
	RunFor  time.Duration
	// Victim: SIGKILL itself at its victimAdmissions-th admission from a
	// local block, running past RunFor until then.
	Victim bool
}

// victimAdmissions is how many admissions the victim makes from its blocks
// before it dies. It kills itself the instant it admits from a block, so
// that block certainly has not gone back: a block with a request in flight
// goes back only on Close or long after its window. Killed from outside a
// moment later, it could have spent and returned its blocks in a window
// already full.
const victimAdmissions = 100

// procReport is what a child that finished reports: admissions per window.
type procReport struct {
	Admitted map[string]int // window start (RFC 3339) -> admitted
	Refused  int
}

func (o procOrders) limits() []ratelimit.Limit {
	w := window("api_key", o.Key, ratelimit.MetricRequests, o.Limit, 1)
	w.Window, w.Local = o.Window, o.Local
	return []ratelimit.Limit{w, concurrent("model", o.Key, o.Slots)}
}

// TestProcessChild is a gateway process of TestExactAcrossProcesses. It
// does nothing unless re-executed with procChildEnv set (the helper-process
// pattern): then it admits requests with Workers goroutines for RunFor,
// holding each slot a moment, and reports on stdout.
func TestProcessChild(t *testing.T) {
	raw := os.Getenv(procChildEnv)
	if raw == "" {
		return
	}
	var o procOrders
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, o.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := ratelimit.New(pool)
	var mu sync.Mutex
	rep := procReport{Admitted: map[string]int{}}
	var fromBlocks atomic.Int64
	deadline := time.Now().Add(o.RunFor)
	if o.Victim {
		deadline = deadline.Add(3 * o.Window) // dies before: every window has room
	}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				g, err := l.Reserve(ctx, "", "", o.limits())
				if errors.Is(err, ratelimit.ErrExceeded) {
					mu.Lock()
					rep.Refused++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					fmt.Printf("error %v\n", err)
					return
				}
				if o.Victim && g.Reservations[0].Local && fromBlocks.Add(1) == victimAdmissions {
					self, _ := os.FindProcess(os.Getpid())
					_ = self.Kill() // SIGKILL: no deferred call, no Close
				}
				time.Sleep(500 * time.Microsecond) // the upstream call, holding its slot
				if _, err := l.Commit(ctx, g, nil); err != nil {
					fmt.Printf("error %v\n", err)
					return
				}
				mu.Lock()
				rep.Admitted[g.Reservations[0].WindowStart.UTC().Format(time.RFC3339)]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l.Close()
	pool.Close()
	b, _ := json.Marshal(rep)
	fmt.Printf("report %s\n", b)
}

// Four gateway processes (separate OS processes) of 16 goroutines share a
// window limit of 1,000 and a concurrency limit of 10, first combining
// their calls, then admitting the window limit from local allotments while
// one of them is SIGKILLed holding blocks: no window admits more than
// 1,000, never more than 10 slots are live, and once Recover has given the
// dead process's blocks back, every counter equals its ledger and the
// doctor finds nothing.
func TestExactAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	t.Parallel()
	for _, local := range []bool{false, true} {
		name := "combining"
		if local {
			name = "allotments"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runProcesses(t, local)
		})
	}
}

func runProcesses(t *testing.T, local bool) {
	const processes, workers, limit, slots = 4, 16, 1000, 10
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := uniqueKey("procs")
	orders := procOrders{URL: url, Key: key, Local: local, Window: 4 * time.Second, Limit: limit, Slots: slots,
		Workers: workers, RunFor: 3 * time.Second}

	// Watch the live slots while the processes run.
	stopWatch := make(chan struct{})
	var peak atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			if n := liveLeases(t, pool, "model", key); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	reports := make([]procReport, processes)
	for i := range processes {
		o := orders
		o.Victim = local && i == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = runChild(t, o)
		}()
	}
	wg.Wait()
	close(stopWatch)
	<-watched

	if p := peak.Load(); p > slots {
		t.Errorf("%d live slots seen, limit %d", p, slots)
	}
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue+c.ReservedValue > limit {
			t.Errorf("window %s: used %g + reserved %g over the limit %d", c.WindowStart, c.UsedValue, c.ReservedValue, limit)
		}
	}
	perWindow := map[string]int{}
	for _, r := range reports {
		for w, n := range r.Admitted {
			perWindow[w] += n
		}
	}
	for w, n := range perWindow {
		if n > limit {
			t.Errorf("window %s: the survivors alone admitted %d, limit %d", w, n, limit)
		}
	}

	// The dead process's blocks come back once their window is over.
	m := ratelimit.NewMaintenance(pool, ratelimit.WithLostAllotmentGrace(500*time.Millisecond))
	var recovered ratelimit.RecoveryResult
	if local {
		blocks := allotments(t, pool, "api_key", key)
		var lastEnd time.Time
		for _, b := range blocks {
			if b.ReturnedAt == nil && b.ExpiresAt.After(lastEnd) {
				lastEnd = b.ExpiresAt
			}
		}
		if lastEnd.IsZero() {
			t.Fatalf("the killed process held no open block (%d blocks in all)", len(blocks))
		}
		waitPast(t, pool, lastEnd.Add(time.Second+100*time.Millisecond)) // its window's end, plus the grace and a report period
		recovered, err = m.Recover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if recovered.ReturnedAllotments == 0 {
			t.Errorf("Recover returned no allotment of the killed process: %+v", recovered)
		}
		stranded := 0.0
		for _, b := range allotments(t, pool, "api_key", key) {
			if b.ReturnedAt == nil {
				t.Errorf("block %+v still open after Recover", b)
			}
			stranded += max(b.Granted-b.Used, 0)
		}
		t.Logf("blocks: %d; units granted but unused (the killed process's included): %g", len(blocks), stranded)
	}
	t.Logf("per window (survivors): %v; peak live slots %d; recovered %s", perWindow, peak.Load(), recovered)
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}

// runChild runs one gateway process and returns its report (none from a
// victim, which must die by SIGKILL).
func runChild(t *testing.T, o procOrders) procReport {
	t.Helper()
	raw, _ := json.Marshal(o)
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), procChildEnv+"="+string(raw))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Error(err)
		return procReport{}
	}
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return procReport{}
	}
	var rep procReport
	scan := bufio.NewScanner(out)
	for scan.Scan() {
		line := scan.Text()
		switch {
		case strings.HasPrefix(line, "report "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &rep); err != nil {
				t.Error(err)
			}
		case strings.HasPrefix(line, "error "):
			t.Errorf("child: %s", line)
		}
	}
	err = cmd.Wait()
	if o.Victim {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.String() != "signal: killed" {
			t.Errorf("the victim did not die by SIGKILL: %v (reported %+v)", err, rep)
		}
		return procReport{}
	}
	if err != nil {
		t.Errorf("child: %v", err)
	}
	return rep
}
