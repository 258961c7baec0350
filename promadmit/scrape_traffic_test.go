package promadmit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Scrapes while traffic runs see consistent counters: none goes down between scrapes, hot
// statements never outnumber statements, and calls never fall short of statements; the calls
// waiting are never below 0 nor above the callers.
func TestScrapesWhileTrafficRuns(t *testing.T) {
	t.Parallel()
	limiter := ratelimit.New(pgtest.NewPool(t))
	reg, metrics := newRegistered(t)
	registerCombining(t, reg, limiter)

	key := fmt.Sprintf("scrape-%d", time.Now().UnixNano())
	hot := limit("api_key", key, ratelimit.MetricRequests, 1e9, 1, httpadmit.Enforce)
	var traffic sync.WaitGroup
	var stop atomic.Bool
	const callers = 12
	for range callers {
		traffic.Go(func() {
			for !stop.Load() {
				start := time.Now()
				g, err := limiter.Reserve(context.Background(), "", "", []ratelimit.Limit{hot.Limit})
				metrics.DatabaseCall(httpadmit.OpReserve, time.Since(start), err)
				if err != nil {
					t.Error(err)
					return
				}
				metrics.Decided([]httpadmit.LimitOutcome{{Limit: hot, Outcome: httpadmit.OutcomeAdmitted, Utilization: 0.9}})
				metrics.LeasesHeld(1)
				if _, err := limiter.Commit(context.Background(), g, nil); err != nil {
					t.Error(err)
					return
				}
				metrics.LeasesHeld(-1)
			}
		})
	}

	last := map[string]float64{}
	// Scrape for 3 s and at least 10 times: under load 3 s could pass with fewer scrapes, which
	// the check below would take for a test that scraped no traffic. At most 30 s.
	minimum, deadline := time.Now().Add(3*time.Second), time.Now().Add(30*time.Second)
	scrapes := 0
	for ; (time.Now().Before(minimum) || scrapes < 10) && time.Now().Before(deadline) && !t.Failed(); scrapes++ {
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("Gather during traffic: %v", err)
		}
		now, gauges := counterValues(families), gaugeValues(families)
		for _, down := range wentDown(last, now) {
			t.Errorf("scrape %d: %s", scrapes, down)
		}
		for _, kind := range []string{promadmit.KindReserve, promadmit.KindSettle} {
			// Each of the callers makes one call at a time.
			if w := gauges["pgadmit_combined_waiting/"+kind]; w < 0 || w > callers {
				t.Errorf("scrape %d: %s: %g calls waiting, of %d callers", scrapes, kind, w, callers)
			}
			statements := now["pgadmit_combined_statements_total/"+kind]
			if h := now["pgadmit_combined_hot_statements_total/"+kind]; h > statements {
				t.Errorf("scrape %d: %s: %g hot statements of %g statements", scrapes, kind, h, statements)
			}
			if c := now["pgadmit_combined_calls_total/"+kind]; c < statements {
				t.Errorf("scrape %d: %s: %g calls in %g statements", scrapes, kind, c, statements)
			}
		}
		last = now
	}
	stop.Store(true)
	traffic.Wait()
	if scrapes < 10 || last["pgadmit_combined_statements_total/"+promadmit.KindReserve] == 0 {
		t.Fatalf("%d scrapes, last %v: the test did not scrape traffic", scrapes, last)
	}
}

// wentDown says which series of last (counterValues) went down in now, a
// later scrape, or are gone from it.
func wentDown(last, now map[string]float64) []string {
	var down []string
	for series, v := range last {
		if now[series] < v {
			down = append(down, fmt.Sprintf("%s went down from %g to %g", series, v, now[series]))
		}
	}
	return down
}

// counterValues flattens the counters and histogram counts of families by name and label
// values.
func counterValues(families []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			series := f.GetName()
			for _, l := range m.GetLabel() {
				series += "/" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				out[series] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[series] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// gaugeValues flattens the gauges of families by name and label values, as counterValues
// does the counters.
func gaugeValues(families []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range f.GetMetric() {
			series := f.GetName()
			for _, l := range m.GetLabel() {
				series += "/" + l.GetValue()
			}
			out[series] = m.GetGauge().GetValue()
		}
	}
	return out
}
