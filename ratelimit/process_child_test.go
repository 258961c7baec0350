package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	// MaxRun bounds the run should the parent never say stop (it closes
	// the child's stdin once the window limit refused in enough windows).
	MaxRun time.Duration
	// Victim: SIGKILL itself at its victimAdmissions-th admission (with
	// allotments, from a local block), while its other workers' calls are
	// in flight (combined Reserve and Commit statements, or blocks taken
	// and reported); it ignores stdin.
	Victim bool
	// HeldSlots is the file of the count of slots held by every process
	// (heldSlots), in which this one is Proc.
	HeldSlots string
	Proc      int
}

// procLeaseTTL is the victim's lease TTL for the concurrency limit. Its
// slots come back to the others when its leases lapse (Recover then
// releases them): far sooner than DefaultLeaseTTL (2 minutes, in which the
// others shared what the victim had not held, once a single slot). The
// others keep DefaultLeaseTTL: heldSlots counts a slot as held until its
// holder gives it back, so a lease that lapsed first (a holder stalled
// past the TTL: a loaded machine, a pause) would let the database admit
// one more while the old one still counts, a peak over the limit with no
// over-admission. Each holder checks that its lease was still live when it
// gave the slot back (leaseLapsed), the parent that the victim's were.
const procLeaseTTL = 5 * time.Second

// victimAdmissions is how many admissions the victim makes (with
// allotments, from its blocks) before it dies. It kills itself the instant
// it admits from a block, so that block certainly has not gone back: a
// block with a request in flight goes back only on Close or long after its
// window. Killed from outside a moment later, it could have spent and
// returned its blocks in a window already full.
const victimAdmissions = 100

// The child's stdout, one event a line: "admit W B" for each admission
// (written as it is made, so that the victim's count up to its death
// reaches the parent), B the block it came from (procInDB: decided in the
// database), "refuse W" for the first refusal by the window limit in
// window W, "error ..." and "done". W is the window's start, RFC 3339 in
// UTC.
const (
	procAdmit  = "admit "
	procRefuse = "refuse "
	procError  = "error "
	procDone   = "done"
	procInDB   = "-"
)

func (o procOrders) limits() []ratelimit.Limit {
	w := window("api_key", o.Key, ratelimit.MetricRequests, o.Limit, 1)
	w.Window, w.Local = o.Window, o.Local
	c := concurrent("model", o.Key, o.Slots)
	if o.Victim {
		c.LeaseTTL = procLeaseTTL
	}
	return []ratelimit.Limit{w, c}
}

// refusedWindow returns the start of the window whose limit refused err, if
// it was the window limit of o (not the concurrency limit).
func (o procOrders) refusedWindow(err error) (string, bool) {
	var ex *ratelimit.ExceededError
	if !errors.As(err, &ex) || ex.ScopeType != "api_key" || ex.Metric != ratelimit.MetricRequests {
		return "", false
	}
	return windowName(ex.ResetAt.Add(-o.Window)), true
}

func windowName(start time.Time) string { return start.UTC().Format(time.RFC3339) }

// TestProcessChild is a gateway process of TestExactAcrossProcesses. It
// does nothing unless re-executed with procChildEnv set (the helper-process
// pattern): then it admits requests with Workers goroutines until its stdin
// closes, holding each slot a moment, and reports each event on stdout.
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
	// The database's clock is at least this host's plus ahead (its now()
	// was read before this host's second reading) and at most this host's
	// plus behind (after its first).
	before := time.Now()
	dbNow := pgtest.DBNow(t, pool)
	ahead, behind := time.Until(dbNow), dbNow.Sub(before)
	slots, err := mapHeldSlots(o.HeldSlots)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slots.unmap() }()
	l := ratelimit.New(pool)
	stop := make(chan struct{})
	if !o.Victim {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stop)
		}()
	}
	deadline := time.Now().Add(o.MaxRun)
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return time.Now().Before(deadline)
		}
	}
	var mu sync.Mutex
	refused := map[string]bool{}
	var counted atomic.Int64 // the victim's admissions toward its death
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for running() {
				asked := time.Now()
				g, err := l.Reserve(ctx, "", "", o.limits())
				if errors.Is(err, ratelimit.ErrExceeded) {
					if w, ok := o.refusedWindow(err); ok {
						mu.Lock()
						if !refused[w] {
							refused[w] = true
							fmt.Printf("%s%s\n", procRefuse, w)
						}
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond) // a refused client waits (its retries would crowd the slots' own calls)
					continue
				}
				if err != nil {
					fmt.Printf("%s%v\n", procError, err)
					return
				}
				got := time.Now()
				slots.take(o.Proc) // the grant is in hand: its lease is live
				r := g.Reservations[0]
				block := procInDB
				if r.Local {
					block = r.Allotment
				}
				fmt.Printf("%s%s %s\n", procAdmit, windowName(r.WindowStart), block) // one write: lines do not interleave
				if r.WindowStart.After(got.Add(behind)) {
					// Charged to a window that had not begun, on the
					// database's clock, when the grant came back.
					fmt.Printf("%sadmitted (Local %v) in window %s, which had not begun when the grant came at %s\n", procError,
						r.Local, windowName(r.WindowStart), got.Add(behind).UTC().Format(time.RFC3339Nano))
				}
				if end := g.Reservations[0].WindowStart.Add(o.Window); !asked.Add(ahead).Before(end) {
					// Charged to a window that had ended, on the database's
					// clock, before the request was made: that window's
					// limit does not bound the requests of its time.
					fmt.Printf("%sadmitted (Local %v) in window %s, which ended at %s, before the request came at %s\n", procError,
						g.Reservations[0].Local, windowName(g.Reservations[0].WindowStart), end.UTC().Format(time.RFC3339Nano),
						asked.Add(ahead).UTC().Format(time.RFC3339Nano))
				}
				if o.Victim && (r.Local || !o.Local) && counted.Add(1) == victimAdmissions {
					self, _ := os.FindProcess(os.Getpid())
					_ = self.Kill() // SIGKILL: no deferred call, no Close
				}
				time.Sleep(500 * time.Microsecond) // the upstream call, holding its slot
				slots.give(o.Proc)                 // before Commit ends the lease
				if lapsed, ok := leaseLapsed(g, time.Now().Add(behind)); ok {
					// Counted as held after the database stopped counting it.
					fmt.Printf("%sheld a slot past its lease's expiry at %s: the count of slots held is no evidence\n",
						procError, lapsed.UTC().Format(time.RFC3339Nano))
				}
				if _, err := l.Commit(ctx, g, nil); err != nil {
					fmt.Printf("%s%v\n", procError, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	pool.Close()
	fmt.Println(procDone)
}

// leaseLapsed returns the expiry of a lease of g that had lapsed by dbNow
// (the database's clock), if one had.
func leaseLapsed(g ratelimit.Grant, dbNow time.Time) (time.Time, bool) {
	for _, l := range g.Leases {
		if !dbNow.Before(l.ExpiresAt) {
			return l.ExpiresAt, true
		}
	}
	return time.Time{}, false
}
