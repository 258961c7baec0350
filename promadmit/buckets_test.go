package promadmit_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// The latency buckets have a boundary at each of the middleware's default
// timeouts, DefaultDecisionTimeout (250 ms) and DefaultSettleTimeout (2 s),
// so that a call cut off at one lands in the bucket just past it, apart
// from every call that ended in time: a settle cut off at 2 s used to share
// the bucket from 1 s to 2.5 s with one that took 1.1 s. A slow Recover or
// Prune of a few seconds lands under le="5", apart from one of 10 s.
func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	m.DatabaseCall(httpadmit.OpCommit, 4*time.Second, nil)
	m.DatabaseCall(httpadmit.OpRelease, 1100*time.Millisecond, nil)
	m.DatabaseCall(httpadmit.OpRelease, httpadmit.DefaultSettleTimeout+time.Millisecond, nil)
	m.DatabaseCall(httpadmit.OpReserve, 200*time.Millisecond, nil)
	m.DatabaseCall(httpadmit.OpReserve, httpadmit.DefaultDecisionTimeout+time.Millisecond, nil)
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
	want := []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2, 2.5, 5, 10, 30}
	if !slices.Equal(bounds, want) {
		t.Errorf("buckets %v, want %v", bounds, want)
	}
	for _, timeout := range []time.Duration{httpadmit.DefaultDecisionTimeout, httpadmit.DefaultSettleTimeout} {
		if !slices.Contains(bounds, timeout.Seconds()) {
			t.Errorf("no bucket boundary at the default timeout %v: check the buckets against the timeouts", timeout)
		}
	}
	page := scrape(t, reg)
	for _, want := range []string{
		`pgadmit_db_operation_duration_seconds_bucket{operation="commit",result="ok",le="2.5"} 0`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="commit",result="ok",le="5"} 1`,
		// the release that ended in time, then the one cut off
		`pgadmit_db_operation_duration_seconds_bucket{operation="release",result="ok",le="1"} 0`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="release",result="ok",le="2"} 1`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="release",result="ok",le="2.5"} 2`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="reserve",result="ok",le="0.25"} 1`,
		`pgadmit_db_operation_duration_seconds_bucket{operation="reserve",result="ok",le="0.5"} 2`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
