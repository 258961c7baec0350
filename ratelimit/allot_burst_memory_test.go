package ratelimit_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A burst of distinct keys (a client walking through API keys, a
// LimitsFunc keyed by something per request) fills the map of counters
// that Local limits keep state for; once the keys went idle and were
// dropped (TestAllotDropsIdleCounters), the memory is given back too. A Go
// map never shrinks as its entries are deleted: the map used to keep the
// table of the burst for the life of the process (some 18 MB after 200,000
// keys), and the housekeeping walked that empty table ten times a second.
//
// Not parallel: it measures the process's heap.
func TestAllotBurstOfKeysGivesItsMemoryBack(t *testing.T) {
	// Idle after 4 s: the burst's keys must still be kept when the peak is measured, after
	// two collections, which a loaded machine can delay past a second (then every key was
	// dropped and the map made anew: "too little to measure").
	l := ratelimit.New(pgtest.NewPool(t), ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: 4 * time.Second}))
	t.Cleanup(l.Close)
	const burst, slack = 200_000, 4 << 20
	before := heapInUse()
	l.TouchAllotmentSets(uniqueKey("burst"), burst)
	// What the measure below could miss: the burst's state itself.
	if peak := heapInUse(); peak < before+4*slack {
		t.Fatalf("heap in use %d MiB with the burst's keys kept, %d MiB before: too little to measure", peak>>20, before>>20)
	}
	awaitAllotmentSets(t, l, 0, 15*time.Second)
	// A key after the burst is kept as any other.
	l.TouchAllotmentSets(uniqueKey("after"), 1)
	if n := l.AllotmentSets(); n != 1 {
		t.Fatalf("counters kept = %d after one more key, want 1", n)
	}
	if after := heapInUse(); after > before+slack {
		t.Errorf("heap in use %d MiB once the burst's %d keys were dropped, %d MiB before: the burst's memory is still held",
			after>>20, burst, before>>20)
	}
	runtime.KeepAlive(l)
}

// heapInUse is the heap in use once garbage is collected.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
