package main

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/grace"
)

// A Ctrl-C in the middle of the demo's traffic gives back what its gateways hold before the demo
// returns: the tasks of the requests in flight are finished (their reservations and leases
// released) and the Limiters closed, as an interrupted bench does. Nothing stays open in the
// database: no lease until its TTL, no reservation or block until its window ends.
func TestDemoInterruptedLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"plain", []string{"demo", "--duration", "1m", "--instances", "2", "--clients", "4", "--keys", "20"}},
		{"http", []string{"demo", "--http", "--duration", "1m", "--clients", "4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, pool := newDatabase(t)
			ctx, interrupt := context.WithCancel(context.Background())
			defer interrupt()
			stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
			a := newApp(stdout, stderr, func(string) string { return "" })
			go func() { exited <- runApp(ctx, a, append([]string{"--database-url", url}, c.args...)) }()
			awaitHolds(t, pool, "a lease of a request in flight", stderr, func(h dbHolds) bool { return h.leases > 0 })
			interrupt()
			awaitInterrupted(t, stdout, stderr, exited, "demo")
			if h := holdsOf(t, pool); h != (dbHolds{}) {
				t.Errorf("demo %v interrupted mid-traffic left %+v held, want nothing", c.args, h)
			}
		})
	}
}

// A demo interrupted while its server is frozen gives up giving back what it holds once its
// grace (5 s) is over, says that it left something held, and returns: its give-back must not
// hold up a Ctrl-C.
func TestDemoInterruptedOnAFrozenServerGivesUpAfterItsGrace(t *testing.T) {
	t.Parallel()
	dbURL, pool := newDatabase(t)
	f, frozenURL := throughFreezer(t, dbURL, pool, map[string]string{"connect_timeout": "2"})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	stdout, stderr, exited := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	a := newApp(stdout, stderr, func(string) string { return "" })
	go func() {
		exited <- runApp(ctx, a, []string{"--database-url", frozenURL, "demo", "--duration", "1m", "--instances", "2", "--clients", "4", "--keys", "20"})
	}()
	awaitHolds(t, pool, "a lease of a request in flight", stderr, func(h dbHolds) bool { return h.leases > 0 })
	f.Freeze()
	interrupted := time.Now()
	interrupt()
	select {
	case code := <-exited:
		took := time.Since(interrupted)
		want := "pgadmit demo: warning: " + grace.ErrLeftHeld.Error() + "\npgadmit demo: interrupted\n"
		if code != exitFailure || stderr.String() != want {
			t.Errorf("demo interrupted on a frozen server: exit %d, stderr %q; want exit 1, %q", code, stderr.String(), want)
		}
		// The grace, and a cancelled statement's wait for its cancel request, with room for a
		// loaded machine.
		if took > 12*time.Second {
			t.Errorf("demo interrupted on a frozen server returned %s after the interrupt, want within its grace (%s) and a few seconds", took, grace.Default)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("demo interrupted on a frozen server did not return within 60s; stderr %q", stderr.String())
	}
}

// bench interrupted on a frozen server warns as the demo does, in the same words (one piece of
// code says it for both, app.warnLeftHeld), then says it was interrupted.
func TestBenchInterruptedOnAFrozenServerWarnsAsTheDemo(t *testing.T) {
	t.Parallel()
	dbURL, pool := newDatabase(t)
	f, frozenURL := throughFreezer(t, dbURL, pool, map[string]string{"connect_timeout": "2"})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	stdout, stderr, exited := startBench(ctx, frozenURL, "--only", "W7", "--workers", "4", "--think", "20s", "--duration", "1m")
	awaitHolds(t, pool, "the 4 workers' leases", stderr, func(h dbHolds) bool { return h.leases == 4 })
	// Their Reserves answered too: frozen as the leases turned visible, the 4 Reserves of one
	// combined statement lost their answer and their workers knew of no lease to give back.
	f.AwaitQuiet(t, 300*time.Millisecond, 30*time.Second)
	f.Freeze()
	interrupt()
	select {
	case code := <-exited:
		want := "pgadmit bench: warning: " + grace.ErrLeftHeld.Error() + "\npgadmit bench: interrupted\n"
		if code != exitFailure || stderr.String() != want {
			t.Errorf("bench interrupted on a frozen server: exit %d, stderr %q; want exit 1, %q\nstdout:\n%s", code, stderr.String(), want, stdout.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("bench interrupted on a frozen server did not return within 60s; stderr %q", stderr.String())
	}
}
