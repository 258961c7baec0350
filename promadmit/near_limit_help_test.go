package promadmit_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/promadmit"
)

// Two Metrics told apart by labels of their own register on one registry,
// whatever their near-limit thresholds: a registry refuses two help
// strings for one name.
func TestTwoMetricsWithDifferentThresholdsOnOneRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for name, threshold := range map[string]float64{"a": 0.8, "b": 0.57} {
		if _, err := promadmit.New(prometheus.WrapRegistererWith(prometheus.Labels{"gateway": name}, reg), promadmit.WithNearLimit(threshold)); err != nil {
			t.Errorf("New for gateway %s (threshold %v): %v", name, threshold, err)
		}
	}
}
