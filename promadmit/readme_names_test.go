package promadmit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

var (
	// metricToken is a name of pgadmit with a metric's suffix: SQL objects
	// (pgadmit_reserve, pgadmit_goose_lock) have none.
	metricToken = regexp.MustCompile(`\bpgadmit_[a-z_]+?_(?:total|seconds|held|waiting|connections)(?:_bucket|_sum|_count)?\b`)
	anyToken    = regexp.MustCompile(`\bpgadmit_[a-z_]+\b`)
)

// The README names every metric a scrape of Metrics and a combining
// collector has, and every metric name the README and docs/ give is one a
// scrape has (a histogram's _bucket, _sum and _count of one): prose outside
// the PromQL that TestReadmePromQL checks, where a renamed or mistyped
// metric would otherwise go unseen. In the README's Metrics section every
// name of pgadmit is a metric's.
func TestReadmeNamesEveryMetric(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	families := scrapedFamilies(t)
	if len(families) < 20 {
		t.Fatalf("a scrape has %d families", len(families))
	}
	documented := map[string]bool{}
	for _, name := range anyToken.FindAllString(string(readme), -1) {
		documented[name] = true
	}
	for name := range families {
		if !documented[name] {
			t.Errorf("README.md never names %s", name)
		}
	}

	exported := func(name string) bool {
		if families[name] != nil {
			return true
		}
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, s); ok && families[base].GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
		return false
	}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append(docs, "../README.md") {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricToken.FindAllString(string(text), -1) {
			if !exported(name) {
				t.Errorf("%s names %s, which no scrape has", filepath.Base(file), name)
			}
		}
	}

	start := strings.Index(string(readme), "\n- **Metrics**")
	if start < 0 {
		t.Fatal("README.md has no **Metrics** item")
	}
	section := string(readme[start:])
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for _, name := range anyToken.FindAllString(section, -1) {
		if !exported(name) {
			t.Errorf("README.md's Metrics section names %s, which no scrape has", name)
		}
	}
}
