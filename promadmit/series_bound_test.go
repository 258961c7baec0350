package promadmit

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Many goroutines meeting many pairs for the first time at once (run with
// -race) give exactly WithMaxSeries pairs labels of their own, never one
// more, and each pair one answer in every call: a pair's first-timers race
// one another, and other pairs' for the last places.
func TestMaxSeriesExactUnderConcurrentFirstTimers(t *testing.T) {
	t.Parallel()
	const maxSeries, pairs, goroutines, groups = 50, 400, 64, 8
	reg := prometheus.NewRegistry()
	m, err := New(reg, WithMaxSeries(maxSeries))
	if err != nil {
		t.Fatal(err)
	}
	name := func(p int) string { return fmt.Sprintf("type-%d", p) }
	own := make([][pairs]bool, goroutines) // whether each goroutine's call left a pair its labels
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			// The goroutines of a group walk the pairs from one place,
			// each group from its own: first-timers of one pair meet
			// within a group, of different pairs across groups.
			for i := range pairs {
				p := (i + g%groups*pairs/groups) % pairs
				scopeType, metric := m.labels(name(p), "requests")
				switch {
				case scopeType == name(p) && metric == "requests":
					own[g][p] = true
				case scopeType != Other || metric != Other:
					t.Errorf("pair %d: labels %q, %q", p, scopeType, metric)
				}
			}
		})
	}
	close(start)
	wg.Wait()

	admitted := 0
	for p := range pairs {
		for g := range goroutines {
			if own[g][p] != own[0][p] {
				t.Errorf("pair %d: its own labels in goroutine %d %v, in goroutine 0 %v", p, g, own[g][p], own[0][p])
			}
		}
		if own[0][p] {
			admitted++
		}
	}
	if admitted != maxSeries {
		t.Errorf("%d pairs with labels of their own, want exactly %d", admitted, maxSeries)
	}
	// Decided labels by the same set: the admitted pairs and one other.
	for p := range pairs {
		l := httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: name(p), Key: "k"}, Metric: "requests"}}
		m.Decided([]httpadmit.LimitOutcome{{Limit: l, Outcome: httpadmit.OutcomeAdmitted}})
	}
	if n := testutil.CollectAndCount(reg, "pgadmit_http_admissions_total"); n != maxSeries+1 {
		t.Errorf("%d admission series, want %d and other", n, maxSeries)
	}
}
