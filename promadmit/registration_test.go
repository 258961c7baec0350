package promadmit_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/promadmit"
)

// Metrics is one prometheus.Collector: a registry can unregister it (a
// test, a reload), after which New registers again; a second New on the
// same registry says which Metrics holds the names, so that a caller on
// prometheus.DefaultRegisterer can use that one.
func TestMetricsUnregisterAndRegisterAgain(t *testing.T) {
	// Not parallel: it uses prometheus.DefaultRegisterer.
	for name, reg := range map[string]interface {
		prometheus.Registerer
		prometheus.Gatherer
	}{"new registry": prometheus.NewRegistry(), "default registry": prometheus.DefaultRegisterer.(*prometheus.Registry)} {
		t.Run(name, func(t *testing.T) {
			m, err := promadmit.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			c, ok := any(m).(prometheus.Collector)
			if !ok {
				t.Fatal("*Metrics is no prometheus.Collector: nothing can unregister it")
			}
			_, err = promadmit.New(reg)
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) || already.ExistingCollector != c {
				t.Errorf("a second New: %v, want an AlreadyRegisteredError naming the first Metrics", err)
			}
			if !reg.Unregister(c) {
				t.Fatal("Unregister(metrics) = false")
			}
			if n, err := testutil.GatherAndCount(reg, "pgadmit_http_leases_held"); err != nil || n != 0 {
				t.Errorf("after Unregister: %d leases_held series, %v", n, err)
			}
			m2, err := promadmit.New(reg)
			if err != nil {
				t.Fatalf("New after Unregister: %v", err)
			}
			m2.LeasesHeld(1)
			if n, err := testutil.GatherAndCount(reg, "pgadmit_http_leases_held"); err != nil || n != 1 {
				t.Errorf("after New again: %d leases_held series, %v", n, err)
			}
			if c2, ok := any(m2).(prometheus.Collector); ok {
				reg.Unregister(c2)
			}
		})
	}
}
