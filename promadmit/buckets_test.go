package promadmit_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// The latency buckets read against the middleware's timeouts: a decision
// cut off at DefaultDecisionTimeout (250 ms) lands just past le="0.25", a
// settle cut off at DefaultSettleTimeout (2 s) under le="2.5", and a slow
// Recover or Prune of a few seconds under le="5", apart from one of 10 s.
// They used to jump from 2.5 s to 10 s.
func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	m.DatabaseCall(httpadmit.OpCommit, 4*time.Second, nil)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, f := range families {
		if f.GetName() != "pgadmit_db_operation_duration_seconds" {
			continue
		}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	want := []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	if !slices.Equal(bounds, want) {
		t.Errorf("buckets %v, want %v", bounds, want)
	}
	if httpadmit.DefaultDecisionTimeout.Seconds() != .25 || httpadmit.DefaultSettleTimeout.Seconds() > 2.5 {
		t.Errorf("the default timeouts (%v, %v) moved: check the buckets against them", httpadmit.DefaultDecisionTimeout, httpadmit.DefaultSettleTimeout)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		`pgadmit_db_operation_duration_seconds_bucket{operation="commit",result="ok",le="2.5"} 0`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="commit",result="ok",le="5"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
