// Package leakcheck finds goroutines of pgadmit's library packages (or of
// other packages named, a test server's say) that are still running once a
// test has torn down what started them (a Limiter closed, a server shut
// down). Compare against a Snapshot taken before, in a test that is not
// parallel: goroutines of other tests running meanwhile would count too.
package leakcheck

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// libraryFrames are the stack frames of the library's packages (not of
// their tests, "ratelimit_test.", nor of test helpers).
var libraryFrames = []string{
	"github.com/pgadmit/pgadmit/ratelimit.",
	"github.com/pgadmit/pgadmit/httpadmit.",
	"github.com/pgadmit/pgadmit/promadmit.",
	"github.com/pgadmit/pgadmit/db.",
	"github.com/pgadmit/pgadmit/internal/ticking.",
}

// Goroutines lists the goroutines running now, by id: each one's stack.
type Goroutines map[string]string

// Snapshot lists the goroutines running now.
func Snapshot() Goroutines {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := Goroutines{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		gs[head] = g // head: "goroutine N"
	}
	return gs
}

// Library lists the goroutines of gs that run, or were started by, code of
// the library's packages.
func (gs Goroutines) Library() []string { return gs.In(libraryFrames...) }

// In lists the goroutines of gs that run, or were started by, code whose
// stack frames begin with one of frames (a package's import path and a
// dot: "github.com/pgadmit/pgadmit/internal/freezer.").
func (gs Goroutines) In(frames ...string) []string {
	var out []string
	for _, g := range gs {
		if slices.ContainsFunc(frames, func(f string) bool { return strings.Contains(g, f) }) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// New lists the goroutines of the library running now that before did
// not list.
func New(before Goroutines) []string { return NewIn(before, libraryFrames...) }

// NewIn lists the goroutines of frames (see In) running now that before
// did not list.
func NewIn(before Goroutines, frames ...string) []string {
	now := Snapshot()
	for id := range before {
		delete(now, id)
	}
	return now.In(frames...)
}

// AwaitNone fails t, with their stacks, when goroutines of the library
// that before did not list still run d from now: what was torn down left
// them running. Goroutines that end within d (one returning the last
// place of a combiner after Close saw it given back) do not count.
func AwaitNone(t testing.TB, before Goroutines, d time.Duration) {
	t.Helper()
	AwaitNoneIn(t, before, d, libraryFrames...)
}

// AwaitNoneIn is AwaitNone for the goroutines of frames (see In). A d of 0
// checks once: a Close that waits for what it started leaves none.
func AwaitNoneIn(t testing.TB, before Goroutines, d time.Duration, frames ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := NewIn(before, frames...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutine(s) of pgadmit still running %v after teardown:\n\n%s", len(left), d, strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
