package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local limit whose call's context ends while it waits for a block (the
// block request held up behind a lock on the counters) is decided nowhere:
// the call returns its context's error, and Stats().Local counts it in
// neither FromBlocks nor InDatabase, as a call whose context had ended when
// it began. It used to count in InDatabase, a database decision never made.
func TestLocalStatsCountNoLimitWhoseContextEndedWaitingForABlock(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	if err := testq.OpsLockCounters(context.Background(), heldTx(t, pool)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, uniqueKey("wait"), 1e6, 1)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve whose context ended waiting for a block: %v, want its context's error", err)
	}
	if s := l.Stats().Local; s.InDatabase != 0 || s.FromBlocks != 0 {
		t.Errorf("Stats().Local = %+v after a call whose context ended waiting for a block, want no count", s)
	}
}
