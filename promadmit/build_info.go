package promadmit

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// modulePath is pgadmit's module.
const modulePath = "github.com/pgadmit/pgadmit"

// newBuildInfo is pgadmit_build_info: 1, labelled with the version of
// pgadmit's module that the process was built with and its Go version,
// read once (the build does not change while the process runs).
func newBuildInfo() prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pgadmit_build_info",
		Help: `Always 1: the version of pgadmit's module the process was built with ("(devel)" built in its tree or from a directory that replaces it, "unknown" without build information) and its Go version.`,
		ConstLabels: prometheus.Labels{
			"version":   moduleVersion(debug.ReadBuildInfo()),
			"goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}

// moduleVersion is the version of pgadmit's module in bi, the process's
// build information (ok: debug.ReadBuildInfo had it): the main module's
// (pgadmit's own commands and tests), or a dependency's, or what replaced
// it. A module built in its tree, or replaced by a directory, has no
// version: "(devel)", as Go names a main module so built. A build without
// the information, or without pgadmit, is "unknown".
func moduleVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "unknown"
	}
	m := &bi.Main
	if m.Path != modulePath {
		m = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				m = d
			}
		}
	}
	if m == nil {
		return "unknown"
	}
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" {
		return "(devel)"
	}
	return m.Version
}
