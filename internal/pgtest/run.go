package pgtest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/peterldowns/pgtestdb"
)

// Run gives a program outside `go test` (a Makefile helper such as the one behind `make
// sqlc-vet`) what [NewURL] gives a test: it calls fn with the URL of a fresh database migrated to
// pgadmit's latest schema, on the DATABASE_URL server or a throwaway cluster, then drops the
// database and stops the cluster. It returns fn's error, or why no database could be made.
func Run(fn func(url string) error) error {
	mainCalled.Store(true)
	defer stopCluster()

	tb := &programTB{}
	var fnErr error
	tb.do(func() {
		base, err := server()
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		conf := pgtestdb.Custom(tb, base, migrator{})
		fnErr = fn(conf.URL())
	})
	// Cleanups run last-in first-out, like testing's, each where it may fail like a test.
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.do(tb.cleanups[i])
	}
	return errors.Join(fnErr, tb.err)
}

// programTB is the part of testing.TB that pgtestdb needs, for use outside tests: Fatalf records
// the failure and ends the calling goroutine, as testing's does, so pgtestdb never runs on past
// a failure.
type programTB struct {
	mu       sync.Mutex
	cleanups []func()
	err      error
}

var _ pgtestdb.TB = (*programTB)(nil)

// do runs f on its own goroutine, so that Fatalf can end it, and waits for it.
func (tb *programTB) do(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func (tb *programTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

func (tb *programTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.err != nil
}

func (tb *programTB) Fatalf(format string, args ...any) {
	tb.mu.Lock()
	tb.err = errors.Join(tb.err, fmt.Errorf(format, args...))
	tb.mu.Unlock()
	runtime.Goexit()
}

func (tb *programTB) Helper() {}

func (tb *programTB) Logf(string, ...any) {}
