package promadmit_test

import (
	"os"
	"regexp"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every alert of the README (a query that fires on "> 0") reads series
// that are there, at 0, from New and NewCombiningCollector on: increase
// needs two samples of a series, so an alert on a series that appears with
// its first count never sees a process's first occurrence, which is the
// one it is for ("the first one too").
func TestReadmeAlertsReadSeriesThereFromZero(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres") // never connects: Stats reads memory
	reg, _ := newRegistered(t)
	registerCombining(t, reg, ratelimit.New(pool))
	gathered, err := reg.Gather() // before any traffic
	if err != nil {
		t.Fatal(err)
	}
	atZero := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		atZero[f.GetName()] = f
	}
	alerts := 0
	for _, q := range readmeQueries(string(readme)) {
		if !regexp.MustCompile(`>\s*0\s*$`).MatchString(q) {
			continue
		}
		alerts++
		for _, sel := range promqlSelector.FindAllStringSubmatch(q, -1) {
			name, matchers := sel[1], sel[2]
			f := atZero[name]
			if f == nil {
				t.Errorf("%s: no series of %s before its first count", q, name)
				continue
			}
			if !seriesMatch(f.GetMetric(), promqlMatcher.FindAllStringSubmatch(matchers, -1)) {
				t.Errorf("%s: no series of %s%s before its first count", q, name, matchers)
			}
		}
	}
	if alerts < 3 {
		t.Errorf("found %d alerts (queries ending in > 0) in README.md", alerts)
	}
}

// seriesMatch reports whether a series of metrics has labels that
// every matcher of = or =~ takes (the other operators are not checked).
func seriesMatch(metrics []*dto.Metric, matchers [][]string) bool {
	for _, m := range metrics {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for _, mt := range matchers {
			label, op, value := mt[1], mt[2], mt[3]
			switch op {
			case "=":
				ok = ok && labels[label] == value
			case "=~":
				ok = ok && regexp.MustCompile("^(?:"+value+")$").MatchString(labels[label])
			}
		}
		if ok {
			return true
		}
	}
	return false
}
