package bench

import (
	"context"
	"errors"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// maxLatencies bounds the latencies a workload keeps, over all its workers (64 MiB): a default
// run of W8, which decides about a million operations a second, keeps every one; a longer one a
// uniform sample (--duration 1h kept billions, tens of GB, and sorted them).
const maxLatencies = 1 << 23

// latencies are one worker's latencies of its decided operations: every one up to keep of
// them, then a uniform sample of keep of them (reservoir sampling), each standing for
// ops/len(kept) operations.
type latencies struct {
	kept []time.Duration
	ops  int64 // latencies added
}

// add adds d, the latency of one more operation, keeping at most keep latencies.
func (l *latencies) add(d time.Duration, keep int, rng *mrand.Rand) {
	l.ops++
	if len(l.kept) < keep {
		l.kept = append(l.kept, d)
		return
	}
	if i := rng.Int64N(l.ops); i < int64(keep) {
		l.kept[i] = d
	}
}

// sample is what drive measured: counts and each worker's latencies.
type sample struct {
	res     Result
	lat     []latencies
	elapsed time.Duration
}

// measure drives op for d and summarizes it.
func (r *runner) measure(ctx context.Context, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (Result, error) {
	return r.measureWith(ctx, r.lims, d, op)
}

// measureWith drives op for d on lims (one Limiter per instance) and summarizes it.
func (r *runner) measureWith(ctx context.Context, lims []*ratelimit.Limiter, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (Result, error) {
	before := statsOf(lims)
	s, err := r.drive(ctx, d, op)
	if err != nil {
		return Result{}, err
	}
	res := summarize(s)
	after := statsOf(lims)
	reserves, settles := after.Reserve.Sub(before.Reserve), after.Settle.Sub(before.Settle)
	res.ReservesPerStatement = reserves.MeanBatch()
	res.SettlesPerStatement = settles.MeanBatch()
	res.ReserveStatementUs = microseconds(reserves.MeanStatement())
	res.SettleStatementUs = microseconds(settles.MeanStatement())
	streams := s.elapsed * time.Duration(len(lims))
	res.ReserveBusyPercent = percentOf(reserves.Busy, streams)
	res.SettleBusyPercent = percentOf(settles.Busy, streams)
	res.HotPercent = percentOf(reserves.Hot+settles.Hot, reserves.Batches+settles.Batches)
	res.LocalBlocks = after.Local.Granted - before.Local.Granted
	res.LocalFailures = after.Local.Failed - before.Local.Failed
	res.LocalInDatabase = after.Local.InDatabase - before.Local.InDatabase
	if res.LocalBlocks > 0 || res.LocalFailures > 0 {
		res.Checks = append(res.Checks, Check{Name: "failed statements of local blocks", Want: 0, Got: res.LocalFailures, OK: res.LocalFailures == 0})
	}
	return res, nil
}

// statsOf adds up the combining counts of lims, their blocks granted,
// block statements failed and Local limits decided in the database.
func statsOf(lims []*ratelimit.Limiter) ratelimit.Stats {
	var sum ratelimit.Stats
	for _, l := range lims {
		s := l.Stats()
		sum.Reserve = sum.Reserve.Add(s.Reserve)
		sum.Settle = sum.Settle.Add(s.Settle)
		sum.Local.Granted += s.Local.Granted
		sum.Local.Failed += s.Local.Failed
		sum.Local.InDatabase += s.Local.InDatabase
	}
	return sum
}

// percentOf is part over whole in percent (0 when whole is).
func percentOf[N ~int64](part, whole N) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// microseconds is d in microseconds, to a tenth.
func microseconds(d time.Duration) float64 {
	return math.Round(float64(d)/100) / 10
}

// drive runs op in a loop on every worker for d and measures it. An op returning nil is
// admitted; an *ExceededError is a refusal; anything else an error (and, with SQLSTATE 40P01,
// a deadlock), counted under Errors only: ops and latencies are those of admissions and
// refusals. Ops cut short because ctx ended are not counted.
func (r *runner) drive(ctx context.Context, d time.Duration, op func(ctx context.Context, worker int, rng *mrand.Rand) error) (sample, error) {
	type tally struct {
		ops, admitted, rejected, errors, deadlocks, unreachable int64
		firstErr                                                error
		lat                                                     latencies
	}
	tallies := make([]tally, r.cfg.Workers)
	keep := r.keep
	if keep <= 0 {
		keep = max(maxLatencies/r.cfg.Workers, 1)
	}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for w := range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[w]
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(start.UnixNano())))
			sampling := mrand.New(mrand.NewPCG(uint64(w)+1<<32, uint64(start.UnixNano()))) // the workload's draws stay op's own
			for ctx.Err() == nil && time.Now().Before(stop) {
				r.paused[w] = 0
				t0 := time.Now()
				err := op(ctx, w, rng)
				el := time.Since(t0) - r.paused[w]
				if ctx.Err() != nil {
					return
				}
				refused := errors.Is(err, ratelimit.ErrExceeded)
				if err == nil || refused { // decided: an operation of the measure
					t.ops++
					r.counts[w].Add(1)
					t.lat.add(el, keep, sampling)
				}
				var after afterAdmission
				switch {
				case err == nil:
					t.admitted++
				case refused:
					t.rejected++
				default:
					// Not an operation of the measure: one that failed (the database
					// down, say) may take microseconds, and would count as the fastest.
					if errors.As(err, &after) {
						t.admitted++
					}
					t.errors++
					if isDeadlock(err) {
						t.deadlocks++
					}
					if unreachable(err) {
						t.unreachable++
					}
					if t.firstErr == nil {
						t.firstErr = err
					}
				}
			}
		}()
	}
	wg.Wait()
	s := sample{elapsed: time.Since(start), res: Result{Workers: r.cfg.Workers}}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	for _, t := range tallies {
		s.res.Ops += t.ops
		s.res.Admitted += t.admitted
		s.res.Rejected += t.rejected
		s.res.Errors += t.errors
		s.res.Deadlocks += t.deadlocks
		s.res.unreachable += t.unreachable
		if t.firstErr != nil && s.res.FirstError == "" {
			s.res.FirstError = t.firstErr.Error()
		}
		s.lat = append(s.lat, t.lat)
	}
	return s, nil
}

// summarize adds up the measured parts of a workload into its result: counts, ops/s over the
// total time, and percentiles over the latencies of every operation (or a sample: latencies).
func summarize(parts ...sample) Result {
	var out Result
	var lat []latencies
	var elapsed time.Duration
	for _, p := range parts {
		out.Workers = p.res.Workers
		out.Ops += p.res.Ops
		out.Admitted += p.res.Admitted
		out.Rejected += p.res.Rejected
		out.Errors += p.res.Errors
		out.Deadlocks += p.res.Deadlocks
		out.unreachable += p.res.unreachable
		if out.FirstError == "" {
			out.FirstError = p.res.FirstError
		}
		lat = append(lat, p.lat...)
		elapsed += p.elapsed
	}
	out.Seconds = elapsed.Seconds()
	ps := percentiles(lat, 50, 99)
	p50, p99 := ps[0], ps[1]
	out.P50us, out.P99us = p50.Microseconds(), p99.Microseconds()
	out.P50ns, out.P99ns = p50.Nanoseconds(), p99.Nanoseconds()
	if elapsed > 0 {
		out.OpsPerS = float64(out.Ops) / elapsed.Seconds()
	}
	return out
}

// percentiles returns the nearest-rank p-th percentile, for each p of ps, of the latencies of
// groups' operations: the least latency that at least p % of them did not exceed. A group that
// kept a sample of its latencies weighs each by the operations it stands for (ops/len(kept)),
// so that a worker that decided more operations than another counts for more; when every group
// kept all of them, this is the nearest rank over them all. It sorts each group's latencies.
func percentiles(groups []latencies, ps ...int) []time.Duration {
	out := make([]time.Duration, len(ps))
	var all []time.Duration
	var ops int64
	for _, g := range groups {
		if len(g.kept) == 0 {
			continue
		}
		slices.Sort(g.kept)
		all = append(all, g.kept...)
		ops += g.ops
	}
	if len(all) == 0 {
		return out
	}
	slices.Sort(all)
	// within is how many operations took d or less, as the groups' latencies tell.
	within := func(d time.Duration) float64 {
		var n float64
		for _, g := range groups {
			if len(g.kept) == 0 {
				continue
			}
			k := sort.Search(len(g.kept), func(i int) bool { return g.kept[i] > d })
			n += float64(k) * float64(g.ops) / float64(len(g.kept))
		}
		return n
	}
	for j, p := range ps {
		rank := max((int64(p)*ops+99)/100, 1) // ceil(p/100 * ops)
		i := sort.Search(len(all), func(i int) bool { return within(all[i]) >= float64(rank) })
		out[j] = all[min(i, len(all)-1)] // past the end only by rounding: the largest
	}
	return out
}

// isDeadlock reports a PostgreSQL deadlock error (SQLSTATE 40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
