package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// DBNow reads the database's clock, on which Reserve decides (its now()), whatever the test's
// clock says.
func DBNow(t testing.TB, conn dbtest.DBTX) time.Time {
	t.Helper()
	now, err := dbtest.New().OpsNow(context.Background(), conn)
	if err != nil {
		t.Fatalf("OpsNow: %v", err)
	}
	return now
}

// AwaitRoomInWindow returns when the database's current window of length w has at least need
// left, waiting for the next one to begin if it has not: a test that fills a window and then
// expects a refusal, or reads the window back, must not see it end between the two.
func AwaitRoomInWindow(t testing.TB, conn dbtest.DBTX, w, need time.Duration) {
	t.Helper()
	if left := leftInWindow(DBNow(t, conn), w); left < need {
		time.Sleep(left + awaitPastStart)
	}
}

// awaitPastStart is how far into the next window AwaitRoomInWindow and ShortWindowWithRoom
// sleep, when they sleep: past its start on the database's clock, whatever the round trip.
const awaitPastStart = 50 * time.Millisecond

// ShortWindowWithRoom returns one of lengths (short windows, whole seconds, each longer than need
// by more than awaitPastStart) whose current window on the database's clock has at least need
// left, for a test that does need's work in one window and then waits for that window to END
// (WindowWithRoom's longer windows would hold it minutes): of those, the one that ends soonest,
// counting for each length whose window has less than need left a sleep until its next window.
// It sleeps, as AwaitRoomInWindow does, only when a next window ends sooner than every current
// one with need left, or none has; AwaitRoomInWindow on one length sleeps whenever its window
// has less than need left (three times in four for a 12 s window and 9 s needed).
func ShortWindowWithRoom(t testing.TB, conn dbtest.DBTX, lengths []time.Duration, need time.Duration) time.Duration {
	t.Helper()
	for _, d := range lengths {
		if d%time.Second != 0 || d < need+awaitPastStart {
			t.Fatalf("ShortWindowWithRoom: a window of %v; want whole seconds, more than %v (need %v)", d, need+awaitPastStart, need)
		}
	}
	if len(lengths) == 0 {
		t.Fatalf("ShortWindowWithRoom: no lengths")
	}
	w, wait := shortWindowWithRoom(DBNow(t, conn), lengths, need)
	if wait > 0 {
		time.Sleep(wait)
	}
	return w
}

// shortWindowWithRoom returns the length of lengths whose window, of need left or more, ends
// soonest after now, and how long to sleep first: nothing when that window holds now, or until
// just past the start of the next one (awaitPastStart) when the one holding now has less than
// need left. Every length is at least need+awaitPastStart; the first of equals wins.
func shortWindowWithRoom(now time.Time, lengths []time.Duration, need time.Duration) (w, wait time.Duration) {
	var bestEnd time.Duration
	for i, d := range lengths {
		left, sleep := leftInWindow(now, d), time.Duration(0)
		if left < need {
			sleep = left + awaitPastStart
			left = d - awaitPastStart
		}
		if end := sleep + left; i == 0 || end < bestEnd {
			w, wait, bestEnd = d, sleep, end
		}
	}
	return w, wait
}

// WindowWithRoom returns the length of a window, w or a few minutes more, whose current window
// on the database's clock has at least need left, for a test whose calls must all meet on one
// counter row of a long window (an hour): AwaitRoomInWindow on w alone sleeps until the next
// window when w's ends within need, up to need (minutes, holding one of the few slots of
// go test -parallel), where a window a few minutes longer, which ends at another moment, has
// room now. Only when none of the lengths it tries has need left does it wait, as
// AwaitRoomInWindow, for w's next window, and return w.
func WindowWithRoom(t testing.TB, conn dbtest.DBTX, w, need time.Duration) time.Duration {
	t.Helper()
	if d, ok := windowWithRoom(DBNow(t, conn), w, need); ok {
		return d
	}
	AwaitRoomInWindow(t, conn, w, need)
	return w
}

// windowExtras are what WindowWithRoom adds to w, in turn, for a window with room: whole
// minutes, prime, so that the windows of each length end at moments far apart.
var windowExtras = []time.Duration{0, 7 * time.Minute, 11 * time.Minute, 13 * time.Minute}

// windowWithRoom returns the first length w+extra (windowExtras) whose window holding now has
// at least need left, and false when none has.
func windowWithRoom(now time.Time, w, need time.Duration) (time.Duration, bool) {
	for _, extra := range windowExtras {
		if leftInWindow(now, w+extra) >= need {
			return w + extra, true
		}
	}
	return 0, false
}

// leftInWindow is how long the window of length w that holds now has left. Windows start at
// multiples of w since the Unix epoch.
func leftInWindow(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixNano()%int64(w))
}
