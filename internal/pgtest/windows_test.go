package pgtest

import (
	"testing"
	"time"
)

// After AwaitRoomInWindow, the database's current window has what was asked left: with a 2 s
// window and 1.5 s asked for, most calls wait for the next window, some return at once.
func TestAwaitRoomInWindow(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	const w, need = 2 * time.Second, 1500 * time.Millisecond
	for range 4 {
		AwaitRoomInWindow(t, pool, w, need)
		// This clock reading comes a round trip (or, on a busy machine, more) later than the one
		// AwaitRoomInWindow judged.
		if left := leftInWindow(DBNow(t, pool), w); left < need-500*time.Millisecond {
			t.Errorf("%s left in the window after AwaitRoomInWindow, want about %s or more", left, need)
		}
		time.Sleep(700 * time.Millisecond) // into the part of the window that has too little left
	}
}
