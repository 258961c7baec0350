package promadmit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Kinds of combined statement, the kind label of the combining metrics.
const (
	KindReserve = "reserve" // Reserve calls
	KindSettle  = "settle"  // Commit and Release calls
)

// Where the Local limits of Reserve calls were decided, the decided label
// of pgadmit_local_limits_total.
const (
	DecidedByBlock    = "block"    // admitted from a block, with no round trip
	DecidedInDatabase = "database" // no block could serve it
)

// NewCombiningCollector exports how limiter combines concurrent calls
// (ratelimit.Limiter.Stats), read at each scrape, by kind (reserve,
// settle):
//
//	pgadmit_combined_statements_total      statements run
//	pgadmit_combined_calls_total           calls they carried
//	pgadmit_combined_hot_statements_total  of them hot batches
//	pgadmit_combined_statement_seconds_total  their time from send to answer
//	                                          (a wait for a pool connection included)
//	pgadmit_combined_waiting               calls waiting now (a gauge)
//
// pgadmit_combined_waiting is the calls in the combiner at the scrape
// (ratelimit.CombinerStats.Waiting): queued for its next statement, or
// carried by one in flight, until it returns: a sample at each scrape.
// Well above the calls per statement (below), with one statement in
// flight per kind (the default), calls queue behind the statement in
// flight.
//
// A statement counts once it returns, answered or failed (one that found
// no connection, and so was never sent, too); one still running does not
// yet. Each counts the calls it carried: a call whose batch the server
// rejected for another call's input is sent again alone, and counts with
// both statements, so the calls may exceed the Reserve (or Commit and
// Release) calls made.
//
// and, with no label, pgadmit_lost_total: what the Limiter may have left
// held with nobody to give it back (ratelimit.Stats.Lost: a Reserve call
// or a Local limit's block request that lost its answer, a give-back of
// what nobody held that failed for good or was dropped from a full queue),
// freed by a lease's TTL, its window's end or Recover. Any increase is
// worth an alert. Of it, pgadmit_give_backs_dropped_total counts the
// give-backs dropped from a full queue (ratelimit.Stats.GiveBacksDropped):
// handed over faster than the database takes them, and
// pgadmit_give_backs_failed_total those that failed for good
// (ratelimit.Stats.GiveBacksFailed): the database or the network down for
// their tries; the rest of pgadmit_lost_total is answers lost.
// The gauge pgadmit_give_backs_waiting is how many give-backs wait in
// those queues now (ratelimit.Stats.GiveBacksWaiting).
// What came of the blocks of Local limits (ratelimit.Stats.Local), also
// with no label:
//
//	pgadmit_local_blocks_granted_total         block requests granted
//	pgadmit_local_blocks_no_room_total         block requests that found no room
//	pgadmit_local_statement_failures_total     statements of blocks that failed
//	pgadmit_local_blocks_abandoned_total       blocks Close could not return
//
// A rising failure count while the granted one stands still is Local
// limits decided in the database (a role without its grants on
// gateway_rate_limit_allotments, say): worth an alert too. Where each Local
// limit was decided, by decided (block, database):
//
//	pgadmit_local_limits_total                 Local limits of Reserve calls
//
// The database's share is a window's last moments, full windows and
// failing block requests: near 0 on a scope with room, all of it while its
// blocks fail.
//
// Calls per statement are rate(calls) / rate(statements), a statement's
// mean time rate(seconds) / rate(statements), and rate(seconds) the
// statements in flight on average: with one in flight per kind (the
// default), a kind near 1 has callers waiting for every statement, and
// well under 1 leaves time to spare.
//
// Each Limiter of a process that has several registers its collector
// through prometheus.WrapRegistererWith with one label name, the first too:
// a registry refuses one name with different label names, and keeps a
// name's label names past Unregister. A Limiter replaced (a reload) takes
// a collector of its own: unregister the old one, which would go on
// serving the closed Limiter's counts (a Register beside it fails with a
// prometheus.AlreadyRegisteredError whose ExistingCollector it is); the
// new one's counts start at 0, which rate and increase read as a reset. A
// nil limiter is a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput).
func NewCombiningCollector(limiter *ratelimit.Limiter) (prometheus.Collector, error) {
	if limiter == nil {
		return nil, invalidOption("NewCombiningCollector", "limiter", nil, "must not be nil")
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"kind"}, nil)
	}
	return &combining{
		limiter:    limiter,
		statements: desc("pgadmit_combined_statements_total", "Combined statements run, by kind (reserve, settle), counted once they return, answered or failed."),
		calls:      desc("pgadmit_combined_calls_total", "Calls the combined statements carried, by kind: a call sent again alone, after the server rejected its batch, counts with each statement."),
		hot:        desc("pgadmit_combined_hot_statements_total", "Combined statements sent as hot batches (two calls on one counter or concurrency scope), by kind."),
		seconds:    desc("pgadmit_combined_statement_seconds_total", "Time the combined statements took from send to answer, summed, by kind: their wait for a pool connection included."),
		waiting:    desc("pgadmit_combined_waiting", "Calls waiting in the combiner now, by kind: queued for its next statement, or carried by one in flight until it returns."),
		lost: prometheus.NewDesc("pgadmit_lost_total",
			"What may stay held for nobody until a lease's TTL, a window's end or Recover: Reserve calls and block requests of Local limits whose statement was sent and got no answer, and give-backs of what nobody held (a grant or task whose caller left) that failed for good or were dropped beyond the bound of those waiting (those also in pgadmit_give_backs_failed_total and pgadmit_give_backs_dropped_total).", nil, nil),
		giveBacksDropped: prometheus.NewDesc("pgadmit_give_backs_dropped_total",
			"Give-backs of what nobody held (a grant or task whose caller left) dropped, never tried, because the queue of those waiting their turn was full; each counts in pgadmit_lost_total too.", nil, nil),
		giveBacksFailed: prometheus.NewDesc("pgadmit_give_backs_failed_total",
			"Give-backs of what nobody held (a grant or task whose caller left) that were tried and failed for good: a failure no later try could mend, or tries that ran out with the database or the network down; each counts in pgadmit_lost_total too.", nil, nil),
		giveBacksWaiting: prometheus.NewDesc("pgadmit_give_backs_waiting",
			"Give-backs of what nobody held queued now, waiting their turn; a full queue drops its oldest (pgadmit_give_backs_dropped_total).", nil, nil),
		blocksGranted:   prometheus.NewDesc("pgadmit_local_blocks_granted_total", "Blocks of Local limits the database granted.", nil, nil),
		blocksNoRoom:    prometheus.NewDesc("pgadmit_local_blocks_no_room_total", "Block requests of Local limits that found no room in their window.", nil, nil),
		localFailures:   prometheus.NewDesc("pgadmit_local_statement_failures_total", "Statements that take, report, trim or return blocks of Local limits and failed.", nil, nil),
		blocksAbandoned: prometheus.NewDesc("pgadmit_local_blocks_abandoned_total", "Blocks of Local limits that Close could not return, left to Recover.", nil, nil),
		localLimits: prometheus.NewDesc("pgadmit_local_limits_total",
			"Local limits of Reserve calls, by where they were decided: admitted from a block (block), or by the database when no block could serve them (database).", []string{"decided"}, nil),
	}, nil
}

type combining struct {
	limiter                               *ratelimit.Limiter
	statements, calls, hot, seconds, lost *prometheus.Desc
	waiting                               *prometheus.Desc // a gauge
	// Of the give-backs of what nobody held.
	giveBacksDropped, giveBacksFailed, giveBacksWaiting *prometheus.Desc
	// Of Local limits' blocks.
	blocksGranted, blocksNoRoom, localFailures, blocksAbandoned, localLimits *prometheus.Desc
}

func (c *combining) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.statements, c.calls, c.hot, c.seconds, c.waiting, c.lost, c.giveBacksDropped, c.giveBacksFailed, c.giveBacksWaiting,
		c.blocksGranted, c.blocksNoRoom, c.localFailures, c.blocksAbandoned, c.localLimits} {
		ch <- d
	}
}

func (c *combining) Collect(ch chan<- prometheus.Metric) { c.collect(ch, c.limiter.Stats()) }

// collect sends the metrics of s, one reading of the Limiter's Stats, so
// that a scrape's series agree with each other.
func (c *combining) collect(ch chan<- prometheus.Metric, s ratelimit.Stats) {
	for _, k := range []struct {
		kind  string
		stats ratelimit.CombinerStats
	}{{KindReserve, s.Reserve}, {KindSettle, s.Settle}} {
		ch <- prometheus.MustNewConstMetric(c.statements, prometheus.CounterValue, float64(k.stats.Batches), k.kind)
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(k.stats.Requests), k.kind)
		ch <- prometheus.MustNewConstMetric(c.hot, prometheus.CounterValue, float64(k.stats.Hot), k.kind)
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, k.stats.Busy.Seconds(), k.kind)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(k.stats.Waiting), k.kind)
	}
	ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, float64(s.Lost))
	ch <- prometheus.MustNewConstMetric(c.giveBacksDropped, prometheus.CounterValue, float64(s.GiveBacksDropped))
	ch <- prometheus.MustNewConstMetric(c.giveBacksFailed, prometheus.CounterValue, float64(s.GiveBacksFailed))
	ch <- prometheus.MustNewConstMetric(c.giveBacksWaiting, prometheus.GaugeValue, float64(s.GiveBacksWaiting))
	for _, m := range []struct {
		desc  *prometheus.Desc
		count int64
	}{{c.blocksGranted, s.Local.Granted}, {c.blocksNoRoom, s.Local.NoRoom}, {c.localFailures, s.Local.Failed}, {c.blocksAbandoned, s.Local.Abandoned}} {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.count))
	}
	ch <- prometheus.MustNewConstMetric(c.localLimits, prometheus.CounterValue, float64(s.Local.FromBlocks), DecidedByBlock)
	ch <- prometheus.MustNewConstMetric(c.localLimits, prometheus.CounterValue, float64(s.Local.InDatabase), DecidedInDatabase)
}
