package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The housekeeping's trim of a block set aside writes the counter's
// limit_value (informational: inspect shows it, and the room left under
// it) with the limit of the set's latest block, not the limit the trimmed
// block was taken under: after a limit was lowered from 1600 to 800, the
// trim of a block of 1600 set the counter back to 1600, and inspect showed
// 1600, and the room left under it, until the next block was taken.
//
// Sequence: nine admissions of 1 held in flight under 1600 spend over half
// of the first block, so the next one is taken ahead; a request under 800
// then closes the first (set aside, requests in flight, units free), finds
// the next taken under a higher limit too, and takes a block under 800,
// trimming that one; the housekeeping then trims the first.
func TestAllotTrimKeepsTheLatestLimit(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	key := uniqueKey("trimlimit")
	var grants []ratelimit.Grant
	for range 9 {
		grants = append(grants, reserveLocal(t, l, hour, key, 1600, 1))
	}
	for deadline := time.Now().Add(3 * time.Second); len(openBlocks(t, pool, key)) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no block taken ahead within 3s: %+v", openBlocks(t, pool, key))
		}
	}
	grants = append(grants, reserveLocal(t, l, hour, key, 800, 1))
	before := counterRows(t, pool, "model", key)[0]
	if before.LimitValue != 800 {
		t.Fatalf("counter after a block taken under 800: %+v, want limit_value 800", before)
	}
	// The housekeeping trims the block set aside: reserved goes down.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := counterRows(t, pool, "model", key)[0]
		if c.ReservedValue < before.ReservedValue {
			if c.LimitValue != 800 {
				t.Errorf("counter after the trim of a block of 1600: %+v, want limit_value 800 (the latest limit)", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the block set aside was not trimmed within 3s: %+v, %+v", c, openBlocks(t, pool, key))
		}
	}
	for _, g := range grants {
		if _, err := l.Release(context.Background(), g, "done"); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	assertBooksBalance(t, pool, "model", key)
}
