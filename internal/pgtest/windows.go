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

// leftInWindow is how long the window of length w that holds now has left. Windows start at
// multiples of w since the Unix epoch.
func leftInWindow(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixNano()%int64(w))
}
