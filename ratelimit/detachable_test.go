package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A caller alone who leaves while its statement runs returns at once with
// its context's error; the statement runs on, in a context cancelled the
// grace after the caller left, and what it obtained goes to abandon, which
// the Limiter's give-backs (Close) wait for.
func TestRunDetachableReturnsWhenTheCallerLeaves(t *testing.T) {
	l := &Limiter{unheld: newUnheldGiveBacks(), opts: options{leftGrace: 20 * time.Millisecond}}
	started, answer := make(chan struct{}), make(chan struct{})
	var abandoned []int
	op := func(sctx context.Context) (int, error) {
		close(started)
		<-sctx.Done() // cancelled the grace after the caller left
		<-answer      // the server's answer, on its way
		return 7, nil
	}
	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := runDetachable(l, ctx, op, func(res int) { abandoned = append(abandoned, res) })
		errs <- err
	}()
	<-started
	leave()
	select {
	case err := <-errs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("runDetachable after its caller left: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller who left was held while its statement ran")
	}
	waited := make(chan struct{})
	go func() { l.unheld.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Close's wait returned while the statement ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(answer)
	<-waited
	if len(abandoned) != 1 || abandoned[0] != 7 {
		t.Errorf("abandoned %v, want [7]", abandoned)
	}
}

// A caller who stays gets the answer, and nothing is abandoned; a panic in
// the statement's goroutine reaches its caller as an error instead of
// ending the process.
func TestRunDetachableAnswersTheCallerWhoStays(t *testing.T) {
	l := &Limiter{unheld: newUnheldGiveBacks(), opts: options{leftGrace: time.Minute}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	abandon := func(int) { t.Error("an answer its caller took was abandoned") }
	if res, err := runDetachable(l, ctx, func(context.Context) (int, error) { return 7, nil }, abandon); res != 7 || err != nil {
		t.Errorf("runDetachable = %d, %v; want 7, nil", res, err)
	}
	_, err := runDetachable(l, ctx, func(context.Context) (int, error) { panic("boom") }, abandon)
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Errorf("runDetachable of a statement that panicked: %v, want an error naming the panic", err)
	}
	l.unheld.wait()
}
