package promadmit

import "github.com/prometheus/client_golang/prometheus"

// Metrics is one prometheus.Collector, registered as one by New: a
// registry takes all its metrics or none, reg.Unregister(metrics) removes
// them all (so that New can register again), and a second New on the same
// registry fails with an error wrapping a prometheus.AlreadyRegisteredError
// (errors.As finds it; a type assertion does not) whose ExistingCollector
// is the Metrics already there.
var _ prometheus.Collector = (*Metrics)(nil)

// collectors are m's metrics; none for Metrics not made with New.
func (m *Metrics) collectors() []prometheus.Collector {
	if !m.made() {
		return nil
	}
	return []prometheus.Collector{m.admissions, m.requests, m.near, m.latency, m.calls, m.leases, m.recovered, m.pruned, m.build}
}

// Describe sends the descriptors of m's metrics.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect sends m's metrics.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
