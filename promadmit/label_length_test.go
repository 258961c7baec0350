package promadmit_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A caller of Decided other than the middleware may pass scope types and
// metrics of any length, which ratelimit would refuse as limits: each was
// a label value as long, kept for the life of the process (a megabyte a
// series, up to WithMaxSeries of them). They are cut to MaxScopeBytes;
// names ratelimit accepts keep their whole value. No label of any metric,
// whatever the entry point, is longer.
func TestLongScopeTypesAndMetricsAreCut(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	admit := func(scopeType, metric string) {
		m.Decided([]httpadmit.LimitOutcome{{Limit: limit(scopeType, "k", metric, 10, 1, httpadmit.Enforce),
			Outcome: httpadmit.OutcomeAdmitted, Utilization: 0.9}})
	}
	huge := strings.Repeat("t", 1<<20)
	accepted := strings.Repeat("é", ratelimit.MaxScopeBytes/2) // 512 bytes: a scope type ratelimit takes
	admit(huge, huge)
	admit(huge+"-other-tail", huge+"x")                                         // differs only past the cut: the same series
	admit("a"+strings.Repeat("é", 1<<18), "requests")                           // a cut inside a rune: cut before it
	admit(strings.Repeat("\xffa", 1<<16), "tokens")                             // invalid UTF-8, longer once replaced
	admit(promadmit.Other+strings.Repeat("_", 1<<12), ratelimit.MetricRequests) // never Other, cut or not
	admit(accepted, ratelimit.MetricTokens)
	// The other entry points take no free-form label value: a long
	// operation is Other, an error's text is never a label.
	m.DatabaseCall(huge, time.Millisecond, errors.New(huge))
	m.ObserveRecover(ratelimit.RecoveryResult{}, errors.New(huge), time.Millisecond)
	m.LeasesHeld(1)

	if got := testutil.CollectAndCount(reg, "pgadmit_http_admissions_total"); got != 5 {
		t.Errorf("%d admission series, want 5", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				v := l.GetValue()
				if l.GetName() == "scope_type" || l.GetName() == "metric" {
					seen[v] = true
				}
				if len(v) > ratelimit.MaxScopeBytes+1 || !utf8.ValidString(v) {
					t.Errorf("%s: label %s of %d bytes (valid UTF-8 %t), want at most %d", f.GetName(), l.GetName(), len(v), utf8.ValidString(v), ratelimit.MaxScopeBytes+1)
				}
			}
		}
	}
	for _, want := range []string{
		huge[:ratelimit.MaxScopeBytes],
		"a" + strings.Repeat("é", ratelimit.MaxScopeBytes/2-1), // 511 bytes: no half rune
		promadmit.Other + strings.Repeat("_", ratelimit.MaxScopeBytes-len(promadmit.Other)+1),
		accepted,
	} {
		if !seen[want] {
			t.Errorf("no label value %.40q... of %d bytes", want, len(want))
		}
	}
	if seen[promadmit.Other] {
		t.Errorf("a long name was reported as %q, the overflow", promadmit.Other)
	}
}
