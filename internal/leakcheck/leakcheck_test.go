package leakcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/ticking"
)

// A goroutine of the library started after the snapshot is listed until
// it ends; goroutines that were running before are not.
func TestNewListsLibraryGoroutinesStartedSince(t *testing.T) {
	stopBefore := ticking.Every(time.Hour, func() {})
	defer stopBefore()
	before := Snapshot()
	if left := New(before); len(left) != 0 {
		t.Fatalf("listed before anything started:\n%s", strings.Join(left, "\n\n"))
	}
	stop := ticking.Every(time.Hour, func() {})
	left := New(before)
	if len(left) != 1 || !strings.Contains(left[0], "internal/ticking.") {
		t.Fatalf("a ticking goroutine started since: listed %d:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	stop()
	AwaitNone(t, before, time.Second)
}

// NewIn lists the goroutines of the frames it is given (here this test's
// package's), which New, listing the library's, does not; and
// AwaitNoneIn passes once they ended.
func TestNewInListsGoroutinesOfTheFramesGiven(t *testing.T) {
	const frames = "github.com/pgadmit/pgadmit/internal/leakcheck."
	before := Snapshot()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		<-stop
	}()
	if left := NewIn(before, frames); len(left) != 1 {
		t.Errorf("NewIn listed %d goroutines started since, want 1:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if left := New(before); len(left) != 0 {
		t.Errorf("New listed %d goroutines of the library, want none:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	close(stop)
	<-stopped
	AwaitNoneIn(t, before, time.Second, frames)
}
