package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// sweepMetrics is what recover --every --http serves on /metrics: promadmit's metrics, fed by each
// pass as a service's metrics.Recover feeds them, and the statistics of the sweeper's pool. A nil
// *sweepMetrics (no --http) observes nothing.
type sweepMetrics struct {
	reg     *prometheus.Registry
	metrics *promadmit.Metrics
	srv     *server
}

// checkListenAddr refuses a --http address that is not HOST:PORT or :PORT with a numeric port: one
// that no bind could take is a bad command line, where one already taken is not.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return usagef("--http %q: want HOST:PORT or :PORT, such as 127.0.0.1:9187 or :9187", addr)
	}
	return nil
}

// serveSweepMetrics listens on addr and serves the sweeper's metrics there, saying on stderr
// where. An address it cannot bind fails at once, before any pass.
func (a *app) serveSweepMetrics(addr string) (*sweepMetrics, error) {
	reg := prometheus.NewRegistry()
	metrics, err := promadmit.New(reg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsPage(reg))
	srv, err := serveOn(addr, mux)
	if err != nil {
		return nil, fmt.Errorf("cannot serve /metrics on %s: %w", addr, err)
	}
	fmt.Fprintf(a.stderr, "%s: serving /metrics on %s/metrics\n", a.prefix(), srv.url)
	return &sweepMetrics{reg: reg, metrics: metrics, srv: srv}, nil
}

// addPool exports pool's statistics (promadmit.NewPoolCollector), once the sweeper opened it.
func (m *sweepMetrics) addPool(pool *pgxpool.Pool) error {
	if m == nil {
		return nil
	}
	c, err := promadmit.NewPoolCollector(pool)
	if err != nil {
		return err
	}
	return m.reg.Register(c)
}

// observe counts a pass that took took, as metrics.Recover counts a run (ObserveRecover): its
// result (ok, skipped, error, timeout, ...) and what it gave back. A try that could not open the
// pool is counted as a run that gave nothing back, its result classed by promadmit as a run's.
func (m *sweepMetrics) observe(res ratelimit.RecoveryResult, err error, took time.Duration) {
	if m != nil {
		m.metrics.ObserveRecover(res, err, took)
	}
}

// close stops serving, waiting briefly for a scrape in flight.
func (m *sweepMetrics) close() {
	if m != nil {
		m.srv.Close()
	}
}
