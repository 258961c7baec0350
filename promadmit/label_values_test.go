package promadmit_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/promadmit"
)

// Operations, outcomes and modes outside the documented sets are counted
// as "other": each distinct string a caller of the public Observer methods
// passed used to make a series of its own, kept for the life of the
// process. 10,000 distinct strings from 4 goroutines, scraped all along,
// leave the documented series and one "other" per label.
func TestUnknownLabelValuesAreOther(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	team := limit("team", "k", "requests", 10, 1, httpadmit.Enforce)
	oddMode := team
	oddMode.Mode = httpadmit.Mode(7)

	var scrapes atomic.Int64
	stop := make(chan struct{})
	var scraper sync.WaitGroup
	scraper.Go(func() {
		for {
			select {
			case <-stop:
				if scrapes.Load() >= 2 { // at least one scrape ran alongside, whatever the scheduler did
					return
				}
			default:
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("Gather while observing: %v", err)
				return
			}
			scrapes.Add(1)
		}
	})

	const distinct, workers = 10_000, 4
	var observers sync.WaitGroup
	for w := range workers {
		observers.Go(func() {
			for i := w; i < distinct; i += workers {
				s := fmt.Sprintf("made-up-%d", i)
				m.DatabaseCall(s, time.Millisecond, nil)
				m.Decided([]httpadmit.LimitOutcome{
					{Limit: team, Outcome: httpadmit.Outcome(s)},
					{Limit: oddMode, Outcome: httpadmit.OutcomeAdmitted},
				})
			}
		})
	}
	// The documented values keep labels of their own.
	m.DatabaseCall(httpadmit.OpRenewLeases, time.Millisecond, nil)
	m.Decided([]httpadmit.LimitOutcome{{Limit: team, Outcome: httpadmit.OutcomeShadowRefused}})
	observers.Wait()
	close(stop)
	scraper.Wait()

	if got := testutil.CollectAndCount(reg, "pgadmit_db_operation_duration_seconds"); got != 2 {
		t.Errorf("%d operation series, want 2 (renew_leases and other)", got)
	}
	if got := testutil.CollectAndCount(reg, "pgadmit_http_admissions_total"); got != 3 {
		t.Errorf("%d admission series, want 3 (other outcome, other mode, shadow_refused)", got)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		fmt.Sprintf(`pgadmit_db_operation_duration_seconds_count{operation="other",result="ok"} %d`, distinct),
		`pgadmit_db_operation_duration_seconds_count{operation="renew_leases",result="ok"} 1`,
		fmt.Sprintf(`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="other",scope_type="team"} %d`, distinct),
		fmt.Sprintf(`pgadmit_http_admissions_total{metric="requests",mode="other",outcome="admitted",scope_type="team"} %d`, distinct),
		`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="shadow_refused",scope_type="team"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(page, "made-up-") {
		t.Errorf("/metrics shows a value outside the documented sets")
	}
}

// A scope type or metric literally named "other" is a series of its own,
// apart from the pairs beyond WithMaxSeries that Other stands for: it is
// reported as "other_" (and "other_" as "other__", so no two names meet).
// It used to be counted with the overflow: a pair ("other", "other") and
// the pairs beyond the cap were one series.
func TestRealOtherIsNotTheOverflow(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t, promadmit.WithMaxSeries(4))
	admit := func(scopeType, metric string) {
		m.Decided([]httpadmit.LimitOutcome{{Limit: limit(scopeType, "k", metric, 10, 1, httpadmit.Enforce), Outcome: httpadmit.OutcomeAdmitted}})
	}
	admit(promadmit.Other, promadmit.Other) // a real scope type and metric named "other"
	admit(promadmit.Other, "requests")
	admit("team", promadmit.Other)
	admit(promadmit.Other+"_", "tokens") // one named as "other" is reported
	admit("beyond-0", "requests")        // past the cap: the overflow
	admit("beyond-1", "requests")
	admit(promadmit.Other, promadmit.Other)

	if got := testutil.CollectAndCount(reg, "pgadmit_http_admissions_total"); got != 5 {
		t.Errorf("%d admission series, want 5 (four real pairs and the overflow)", got)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		`pgadmit_http_admissions_total{metric="other_",mode="enforce",outcome="admitted",scope_type="other_"} 2`,
		`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="admitted",scope_type="other_"} 1`,
		`pgadmit_http_admissions_total{metric="other_",mode="enforce",outcome="admitted",scope_type="team"} 1`,
		`pgadmit_http_admissions_total{metric="tokens",mode="enforce",outcome="admitted",scope_type="other__"} 1`,
		`pgadmit_http_admissions_total{metric="other",mode="enforce",outcome="admitted",scope_type="other"} 2`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
