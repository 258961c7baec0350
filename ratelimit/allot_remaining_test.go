package ratelimit_test

import (
	"context"
	"sync"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Local reservation's Remaining is what its block had left right after
// that admission: admissions from one block are serialized, so no two of
// them saw the same remainder, and none saw less than nothing. It was read
// once the block's lock had been let go and taken again, and so counted
// the admissions of other goroutines in between: two of them reported the
// same remainder.
func TestLocalRemainingIsWhatItsBlockHadLeftRightAfterIt(t *testing.T) {
	t.Parallel()
	l, _ := localLimiter(t)
	key := uniqueKey("remaining")
	const workers, each = 8, 250
	var mu sync.Mutex
	seen := map[string]map[float64]int{} // block -> Remaining -> admissions that reported it
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				g, err := l.Reserve(context.Background(), "", "", []ratelimit.Limit{localWindow(key, 1e6, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				r := g.Reservations[0]
				if !r.Local {
					continue
				}
				mu.Lock()
				if seen[r.Allotment] == nil {
					seen[r.Allotment] = map[float64]int{}
				}
				seen[r.Allotment][r.Remaining]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) == 0 {
		t.Fatal("no admission from a block")
	}
	for block, remainders := range seen {
		for remaining, n := range remainders {
			if n > 1 || remaining < 0 {
				t.Errorf("block %s: %d admissions reported Remaining %g; want each remainder once, none below 0", block, n, remaining)
			}
		}
	}
}
