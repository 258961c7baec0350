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
