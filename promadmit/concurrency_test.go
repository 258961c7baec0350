package promadmit_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every Observer method from many goroutines at once, with scrapes under
// way (run with -race): the counts add up, the gauge returns to zero, and
// the cap on pairs of scope type and metric holds.
func TestObserverUnderManyGoroutines(t *testing.T) {
	t.Parallel()
	const maxSeries, goroutines, rounds = 8, 32, 200
	reg, m := newRegistered(t, promadmit.WithMaxSeries(maxSeries))
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				l := limit(fmt.Sprintf("type-%d", (g*rounds+i)%50), "key", ratelimit.MetricRequests, 10, 1, httpadmit.Enforce)
				m.LeasesHeld(2)
				m.Decided([]httpadmit.LimitOutcome{{Limit: l, Outcome: httpadmit.OutcomeAdmitted, Utilization: 0.9}})
				m.DatabaseCall(httpadmit.OpReserve, time.Millisecond, nil)
				m.ObserveRecover(ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 1}, nil, time.Millisecond)
				m.LeasesHeld(-2)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-scraped

	const total = goroutines * rounds
	if n := testutil.CollectAndCount(m, "pgadmit_http_admissions_total"); n > maxSeries+1 {
		t.Errorf("%d admission series, want at most %d and other", n, maxSeries)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		"pgadmit_http_leases_held 0",
		fmt.Sprintf(`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="ok"} %d`, total),
		fmt.Sprintf(`pgadmit_recovered_total{kind="leases"} %d`, total),
	} {
		if !slices.Contains(strings.Split(page, "\n"), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var admitted, near float64
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			switch f.GetName() {
			case "pgadmit_http_admissions_total":
				admitted += s.GetCounter().GetValue()
			case "pgadmit_http_near_limit_total":
				near += s.GetCounter().GetValue()
			}
		}
	}
	if admitted != total || near != total {
		t.Errorf("admitted %v, near limit %v, want %d each", admitted, near, total)
	}
}
