package promadmit_test

import (
	"runtime"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// New registers pgadmit_build_info, a gauge at 1 whose labels say which
// pgadmit the process runs (version: the module's version, "(devel)"
// built in this tree, as the tests are) and on which Go (goversion).
func TestNewExportsBuildInfo(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistered(t)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var info *dto.MetricFamily
	for _, f := range families {
		if f.GetName() == "pgadmit_build_info" {
			info = f
		}
	}
	if info == nil || info.GetType() != dto.MetricType_GAUGE || len(info.GetMetric()) != 1 {
		t.Fatalf("pgadmit_build_info: %v, want one gauge", info)
	}
	m := info.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if want := map[string]string{"version": "(devel)", "goversion": runtime.Version()}; len(labels) != len(want) ||
		labels["version"] != want["version"] || labels["goversion"] != want["goversion"] || m.GetGauge().GetValue() != 1 {
		t.Errorf("pgadmit_build_info%v %g, want %v 1", labels, m.GetGauge().GetValue(), want)
	}
}
