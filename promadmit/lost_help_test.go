package promadmit_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The help of pgadmit_lost_total, all an SRE paged for it sees on /metrics,
// names everything ratelimit.Stats.Lost counts: a Reserve call or a block
// request of a Local limit that lost its answer (a block the server may
// have granted), and a give-back of what nobody held that failed for good
// or was dropped beyond the bound of those waiting (ratelimit's backlog).
// It named the Reserve calls and the failed give-backs only.
func TestLostHelpNamesEverythingStatsLostCounts(t *testing.T) {
	t.Parallel()
	c, err := promadmit.NewCombiningCollector(ratelimit.New(pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres")))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 32)
	c.Describe(ch)
	close(ch)
	help := ""
	for d := range ch {
		if strings.Contains(d.String(), `fqName: "pgadmit_lost_total"`) {
			help = regexp.MustCompile(`help: "([^"]*)"`).FindStringSubmatch(d.String())[1]
		}
	}
	if help == "" {
		t.Fatal("no pgadmit_lost_total described")
	}
	for what, phrase := range map[string]string{
		"Reserve calls that lost their answer":           "Reserve calls",
		"block requests of Local limits that lost it":    "block requests of Local limits",
		"give-backs that failed for good":                "failed",
		"give-backs dropped beyond the queue's bound":    "dropped",
		"what ends it: a lease's TTL, a window, Recover": "Recover",
	} {
		if !strings.Contains(help, phrase) {
			t.Errorf("the help of pgadmit_lost_total does not name %s (%q): %s", what, phrase, help)
		}
	}
}
