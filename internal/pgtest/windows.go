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
		time.Sleep(left + 50*time.Millisecond)
	}
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
