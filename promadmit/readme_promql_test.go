package promadmit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

var (
	promqlSelector = regexp.MustCompile(`(pgadmit_[a-z_]+)(\{[^}]*\})?(\[[0-9a-z]+\])?`)
	promqlMatcher  = regexp.MustCompile(`([a-z_]+)(=~|!~|!=|=)"([^"]*)"`)
	promqlBy       = regexp.MustCompile(`by \(([^)]*)\)`)
	inlinePromQL   = regexp.MustCompile("`([^`]*(?:rate|increase|histogram_quantile)\\([^`]*)`")
)

// Every PromQL query of the README (its promql blocks and the inline ones)
// names metrics, labels and label values a real scrape has, takes the rate
// of counters only, over ranges of at least 4m, and the quantile of a histogram's _bucket by le, and
// counts calls by pgadmit_db_operations_total, whose series are all there
// from New (not the histogram's _count, whose are not). There
// is no PromQL parser among the module's dependencies: this checks names
// and shapes, not the grammar.
func TestReadmePromQL(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	queries := readmeQueries(string(readme))
	if len(queries) < 5 {
		t.Fatalf("found %d queries in README.md", len(queries))
	}
	families := scrapedFamilies(t)
	for _, q := range queries {
		t.Run(q, func(t *testing.T) {
			labelsUsed := map[string]bool{}
			for _, sel := range promqlSelector.FindAllStringSubmatchIndex(q, -1) {
				name, matchers, hasRange := q[sel[2]:sel[3]], "", sel[6] >= 0
				if sel[4] >= 0 {
					matchers = q[sel[4]:sel[5]]
				}
				family, suffix := name, ""
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					if base, ok := strings.CutSuffix(name, s); ok && families[base] != nil {
						family, suffix = base, s
					}
				}
				f := families[family]
				if f == nil {
					t.Errorf("%s: no such metric", name)
					continue
				}
				kind := f.GetType()
				switch {
				case suffix != "" && kind != dto.MetricType_HISTOGRAM:
					t.Errorf("%s: %s is a %v, not a histogram", name, family, kind)
				case hasRange && suffix == "" && kind != dto.MetricType_COUNTER:
					t.Errorf("%s: a range over a %v", name, kind)
				case !hasRange && (suffix != "" || kind == dto.MetricType_COUNTER):
					t.Errorf("%s: a counter without rate or increase", name)
				}
				if hasRange && !regexp.MustCompile(`(rate|increase)\($`).MatchString(q[:sel[0]]) {
					t.Errorf("%s: a range vector not under rate or increase", name)
				}
				if hasRange {
					// Prometheus scrapes every minute unless told otherwise, and rate needs
					// two samples in its range: one under four intervals is often empty.
					if d, err := time.ParseDuration(q[sel[6]+1 : sel[7]-1]); err != nil || d < 4*time.Minute {
						t.Errorf("%s: range %s, want at least 4m (four of Prometheus' default scrape interval): %v", name, q[sel[6]:sel[7]], err)
					}
				}
				values := labelValues(f)
				if suffix == "_bucket" {
					values["le"] = map[string]bool{}
				}
				for l := range values {
					labelsUsed[l] = true
				}
				for _, m := range promqlMatcher.FindAllStringSubmatch(matchers, -1) {
					label, op, value := m[1], m[2], m[3]
					seen, ok := values[label]
					if !ok {
						t.Errorf("%s: no label %s", name, label)
						continue
					}
					if op == "=" || op == "=~" {
						for _, v := range strings.Split(value, "|") {
							if !seen[v] {
								t.Errorf("%s: %s never takes the value %q", name, label, v)
							}
						}
					}
				}
			}
			for _, by := range promqlBy.FindAllStringSubmatch(q, -1) {
				for _, l := range strings.Split(by[1], ",") {
					if l = strings.TrimSpace(l); !labelsUsed[l] {
						t.Errorf("by (%s): no metric of the query has %s", by[1], l)
					}
				}
			}
			if strings.Contains(q, "pgadmit_db_operation_duration_seconds_count") {
				t.Errorf("counts calls by the histogram, whose series of a result appear with its first call, which rate and increase never count: use pgadmit_db_operations_total, all there from New")
			}
			if strings.Contains(q, "histogram_quantile(") &&
				(!strings.Contains(q, "_bucket") || !regexp.MustCompile(`by \([^)]*\ble\b`).MatchString(q)) {
				t.Errorf("histogram_quantile not over a _bucket aggregated by le")
			}
		})
	}
}

// readmeQueries are the lines of readme's promql blocks that are not
// comments, and its inline queries.
func readmeQueries(readme string) []string {
	var queries []string
	in := false
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case line == "```promql":
			in = true
		case in && line == "```":
			in = false
		case in && line != "" && !strings.HasPrefix(line, "#"):
			queries = append(queries, line)
		case !in:
			for _, m := range inlinePromQL.FindAllStringSubmatch(line, -1) {
				if strings.Contains(m[1], "pgadmit_") {
					queries = append(queries, m[1])
				}
			}
		}
	}
	return queries
}

// scrapedFamilies is a scrape of Metrics, a combining collector and a
// pool's collector that saw every outcome, mode, operation and result, and a pair of scope type
// and metric past WithMaxSeries (counted as other).
func scrapedFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	pool := pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres") // never connects: Stats reads memory
	reg, m := newRegistered(t, promadmit.WithMaxSeries(1))
	registerCombining(t, reg, ratelimit.New(pool))
	registerPool(t, reg, pool)
	for _, o := range []httpadmit.Outcome{httpadmit.OutcomeAdmitted, httpadmit.OutcomeRefused, httpadmit.OutcomeShadowRefused, httpadmit.OutcomeFailedOpen, httpadmit.OutcomeFailedClosed} {
		for _, mode := range []httpadmit.Mode{httpadmit.Enforce, httpadmit.Shadow} {
			m.Decided([]httpadmit.LimitOutcome{{Limit: limit("api_key", "k", ratelimit.MetricRequests, 10, 1, mode), Outcome: o, Utilization: 0.9}})
		}
	}
	m.Decided([]httpadmit.LimitOutcome{{Limit: limit("model", "k", ratelimit.MetricTokens, 10, 1, httpadmit.Enforce), Outcome: httpadmit.OutcomeAdmitted}})
	results := []error{nil, &ratelimit.ExceededError{}, fmt.Errorf("x: %w", context.DeadlineExceeded),
		errors.New("connection refused"), &ratelimit.LeaseLostError{}, ratelimit.ErrUnknownGrant, ratelimit.ErrUnknownTask}
	for _, op := range []string{httpadmit.OpReserve, httpadmit.OpCommit, httpadmit.OpRelease, httpadmit.OpRenewLeases} {
		for _, err := range results {
			m.DatabaseCall(op, time.Millisecond, err)
		}
	}
	m.ObserveRecover(ratelimit.RecoveryResult{Skipped: true}, nil, time.Millisecond)
	m.ObservePrune(ratelimit.PruneResult{}, nil, time.Millisecond)
	m.LeasesHeld(1)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		families[f.GetName()] = f
	}
	return families
}

// labelValues are the values each label of f takes.
func labelValues(f *dto.MetricFamily) map[string]map[string]bool {
	values := map[string]map[string]bool{}
	for _, s := range f.GetMetric() {
		for _, l := range s.GetLabel() {
			if values[l.GetName()] == nil {
				values[l.GetName()] = map[string]bool{}
			}
			values[l.GetName()][l.GetValue()] = true
		}
	}
	return values
}

// readmeQueries finds an inline query under any of PromQL's range
// functions the README uses: the inline alert on pgadmit_lost_total, an
// increase, went unchecked (the pattern named rate and histogram_quantile
// only). Spans naming pgadmit's SQL functions are no queries.
func TestReadmeQueriesFindsInlineOnes(t *testing.T) {
	t.Parallel()
	text := "worth an alert: `increase(pgadmit_lost_total[10m]) > 0`, and `rate(pgadmit_combined_calls_total[1m])`;\n" +
		"`irate(pgadmit_db_operations_total[1m])`; the SQL of `pgadmit_reserve(...)` and `CALL pgadmit_hot_commit()`\n"
	got := readmeQueries(text)
	want := []string{"increase(pgadmit_lost_total[10m]) > 0", "rate(pgadmit_combined_calls_total[1m])", "irate(pgadmit_db_operations_total[1m])"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("readmeQueries = %q, want %q", got, want)
	}
}
