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
		start := time.Now()
		before := leftInWindow(DBNow(t, pool), w)
		AwaitRoomInWindow(t, pool, w, need)
		left := leftInWindow(DBNow(t, pool), w)
		// The last clock reading comes later than the moment AwaitRoomInWindow returned, by a
		// round trip or, on a busy machine, by a stall of any length, and the window has that
		// much less left by then. Added back, what the calls took beyond what they must (nothing,
		// or the wait for the next window) makes the check independent of stalls: it used to
		// allow 500ms in all. A stall long enough to reach a later window leaves that window's
		// part, and at least as much again added back.
		took, must := time.Since(start), time.Duration(0)
		if before < need {
			must = before + 50*time.Millisecond // AwaitRoomInWindow's wait
		}
		if extra := max(took-must, 0); left+extra < need-500*time.Millisecond {
			t.Errorf("%s left in the window when AwaitRoomInWindow returned, at most (%s read %s later), want about %s or more",
				left+extra, left, extra, need)
		}
		time.Sleep(700 * time.Millisecond) // into the part of the window that has too little left
	}
}
