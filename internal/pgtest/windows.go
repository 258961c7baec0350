package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
)

// AwaitRoomInWindow returns when the database's current window of length w has at least need
// left, waiting for the next one to begin if it has not: a test that fills a window and then
// expects a refusal, or reads the window back, must not see it end between the two. Windows
// start at multiples of w since the Unix epoch, on the database's clock (Reserve decides on the
// server's now(), whatever the test's clock says).
func AwaitRoomInWindow(t testing.TB, conn dbtest.DBTX, w, need time.Duration) {
	t.Helper()
	now, err := dbtest.New().OpsNow(context.Background(), conn)
	if err != nil {
		t.Fatalf("OpsNow: %v", err)
	}
	if left := w - time.Duration(now.UnixNano()%int64(w)); left < need {
		time.Sleep(left + 50*time.Millisecond)
	}
}
