package promadmit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Two Limiters on one registry need a label each, the first too: a
// registry refuses a name whose label names differ between collectors, so
// the first registered plainly and the second through WrapRegistererWith
// fails (the docs said "a second Limiter needs its own labels"), and keeps
// them past Unregister.
func TestCombiningCollectorsOfTwoLimitersBothNeedTheLabel(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres") // never connects: Stats reads memory
	first, err := promadmit.NewCombiningCollector(ratelimit.New(pool))
	if err != nil {
		t.Fatal(err)
	}
	second, err := promadmit.NewCombiningCollector(ratelimit.New(pool))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(first)
	if err := prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "b"}, reg).Register(second); err == nil {
		t.Error("a second Limiter registered with a label beside a first without: the docs' recipe must label both")
	}
	// A registry keeps the label names of a name for its life, past
	// Unregister: labelling the first one later needs a new registry.
	reg.Unregister(first)
	if err := prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "a"}, reg).Register(first); err == nil {
		t.Error("the first Limiter registered again with a label, on the registry that had it without")
	}
	reg = prometheus.NewRegistry()
	for name, c := range map[string]prometheus.Collector{"a": first, "b": second} {
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"limiter": name}, reg).Register(c); err != nil {
			t.Errorf("limiter %s: %v", name, err)
		}
	}
}

// A Limiter replaced (a reload) takes a collector of its own: registered
// beside the old one it is refused, without a panic, with an
// AlreadyRegisteredError naming the old one, which the caller unregisters;
// the scrape then serves the new Limiter's counts alone, with no series
// left of the closed one.
func TestCombiningCollectorOfAReplacedLimiter(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	old := ratelimit.New(pool)
	reg := prometheus.NewRegistry()
	oldCollector, err := promadmit.NewCombiningCollector(old)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(oldCollector)
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("replaced-%d", time.Now().UnixNano())},
		Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Hour}}
	if _, err := old.Reserve(context.Background(), "", "", limits); err != nil {
		t.Fatal(err)
	}
	old.Close()

	replacement := ratelimit.New(pool)
	defer replacement.Close()
	newCollector, err := promadmit.NewCombiningCollector(replacement)
	if err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if err := reg.Register(newCollector); !errors.As(err, &already) || already.ExistingCollector != oldCollector {
		t.Fatalf("the replacement's collector beside the old one: %v, want an AlreadyRegisteredError naming the old one", err)
	}
	if !reg.Unregister(already.ExistingCollector) {
		t.Fatal("Unregister(the old collector) = false")
	}
	if err := reg.Register(newCollector); err != nil {
		t.Fatal(err)
	}
	page := scrape(t, reg)
	if want := `pgadmit_combined_calls_total{kind="reserve"} 0`; !strings.Contains(page, want+"\n") || strings.Count(page, "pgadmit_combined_calls_total{") != 2 {
		t.Errorf("/metrics after the replacement: want %s and the settle series alone:\n%s", want, page)
	}
}
