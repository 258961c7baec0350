package promadmit

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// NewPoolCollector exports how busy pool, the pgx pool a Limiter (or a
// Maintenance) runs on, is (pgxpool.Pool.Stat), read at each scrape, with
// no label. Its connections now, as gauges:
//
//	pgadmit_pool_acquired_connections      in use
//	pgadmit_pool_idle_connections          open and idle
//	pgadmit_pool_constructing_connections  being opened
//	pgadmit_pool_max_connections           the most it opens (MaxConns)
//
// and the acquires of a connection since the pool was made, as counters:
//
//	pgadmit_pool_acquires_total                    acquires that got a connection
//	pgadmit_pool_empty_acquires_total              of them, those that found none idle
//	pgadmit_pool_empty_acquire_wait_seconds_total  the time those waited, summed
//	pgadmit_pool_canceled_acquires_total           acquires whose context ended first
//
// Every statement of a Limiter takes a connection first: the decision,
// the settle and the give-backs of what nobody held wait for one, within
// their timeouts. An empty acquire waited for a connection to be released,
// or for a new one to be opened (the pool's first connections, and each
// that replaces one closed, count too), so the empty acquires' share of
// the acquires, and their wait's rate over the acquires' rate (the mean
// wait of an acquire), rise when the pool is too small for the traffic; a
// canceled acquire got no connection at all (a decision that timed out
// waiting for one, say). pgx acquires again, once more for each, when the
// connection it got had outlived MaxConnLifetime or failed its ping.
//
// Reading the statistics takes the pool's lock for a moment: it is cheap,
// and safe at any time, during Acquire and after Close (whose counts it
// keeps serving: unregister the collector of a pool closed for good).
// Each pool of a process that has several registers its collector through
// prometheus.WrapRegistererWith with one label name, the first too, as the
// combining collectors of several Limiters do (a second collector of one
// pool on one registry fails with a prometheus.AlreadyRegisteredError). A
// nil pool, or one not made by pgxpool.New or pgxpool.NewWithConfig (a
// zero pgxpool.Pool, whose Stat panics), is a *ratelimit.ValidationError
// (errors.Is ratelimit.ErrInvalidInput).
func NewPoolCollector(pool *pgxpool.Pool) (prometheus.Collector, error) {
	switch {
	case pool == nil:
		return nil, invalidOption("NewPoolCollector", "pool", nil, "must not be nil")
	case !statable(pool):
		return nil, invalidOption("NewPoolCollector", "pool", "pgxpool.Pool{}", "must be made by pgxpool.New or pgxpool.NewWithConfig")
	}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &poolCollector{
		pool:         pool,
		acquired:     desc("pgadmit_pool_acquired_connections", "Connections of the pgx pool in use now."),
		idle:         desc("pgadmit_pool_idle_connections", "Connections of the pgx pool open and idle now."),
		constructing: desc("pgadmit_pool_constructing_connections", "Connections of the pgx pool being opened now."),
		max:          desc("pgadmit_pool_max_connections", "The most connections the pgx pool opens (MaxConns)."),
		acquires:     desc("pgadmit_pool_acquires_total", "Acquires of a connection from the pgx pool that got one."),
		emptyAcquires: desc("pgadmit_pool_empty_acquires_total",
			"Acquires of a connection from the pgx pool that found none idle and waited for one to be released or opened; each counts in pgadmit_pool_acquires_total too."),
		emptyWait: desc("pgadmit_pool_empty_acquire_wait_seconds_total",
			"Time the acquires of pgadmit_pool_empty_acquires_total waited for their connection, summed."),
		canceled: desc("pgadmit_pool_canceled_acquires_total",
			"Acquires of a connection from the pgx pool whose context ended before they got one (a decision that timed out waiting for a connection, say)."),
	}, nil
}

// statable reports whether pool.Stat returns, rather than panicking on a
// pool not made by pgxpool's constructors.
func statable(pool *pgxpool.Pool) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	pool.Stat()
	return true
}

type poolCollector struct {
	pool                                                                            *pgxpool.Pool
	acquired, idle, constructing, max, acquires, emptyAcquires, emptyWait, canceled *prometheus.Desc
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.constructing, c.max, c.acquires, c.emptyAcquires, c.emptyWait, c.canceled} {
		ch <- d
	}
}

// Collect sends the metrics of one reading of the pool's Stat, so that a
// scrape's series agree with each other.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	for _, g := range []struct {
		desc  *prometheus.Desc
		value int32
	}{{c.acquired, s.AcquiredConns()}, {c.idle, s.IdleConns()}, {c.constructing, s.ConstructingConns()}, {c.max, s.MaxConns()}} {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(g.value))
	}
	for _, m := range []struct {
		desc  *prometheus.Desc
		count int64
	}{{c.acquires, s.AcquireCount()}, {c.emptyAcquires, s.EmptyAcquireCount()}, {c.canceled, s.CanceledAcquireCount()}} {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.count))
	}
	ch <- prometheus.MustNewConstMetric(c.emptyWait, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
}
