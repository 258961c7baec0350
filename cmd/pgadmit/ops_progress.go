package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// runProgress is a one-shot recover's or prune's progress on stderr, every --progress: after a
// batch, how far the run has got (ratelimit.WithProgress); while no batch ends, that it still
// waits for the database (stillRunning, as doctor says that it is still checking). Lines came
// only after a batch, so a batch that waited for a lock (--lock-timeout 0) or on a server that
// stopped answering, which no lock_timeout ends (the server is not there to apply it), left the
// run silent until Ctrl-C.
type runProgress struct {
	out         io.Writer
	job         string        // "recover" or "prune"
	every       time.Duration // --progress; 0: say nothing
	passTimeout time.Duration // --pass-timeout; 0: none

	mu      sync.Mutex // guards what follows, and the writes to out
	last    ratelimit.Progress
	batchAt time.Time // when the latest batch ended; the run's start before one did
	saidAt  time.Time // when a line was last said; the run's start before one was
	over    bool      // watch's stop was called: a pass given up on (oneShot) says nothing more
}

func newRunProgress(out io.Writer, job string, every, passTimeout time.Duration) *runProgress {
	return &runProgress{out: out, job: job, every: every, passTimeout: passTimeout}
}

// option reports the run's batches to p, also when p says nothing: what the run did so far is
// what it printed if it was given up on (oneShot).
func (p *runProgress) option() ratelimit.MaintenanceOption {
	return ratelimit.WithProgress(0, p.batch)
}

// batch is told of every batch that ended, and says how far the run has got when nothing was
// said for an interval: with an interval under a batch's time (as low as 1ns), after every batch.
func (p *runProgress) batch(pr ratelimit.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		return
	}
	now := time.Now()
	p.last, p.batchAt = pr, now
	if p.every > 0 && now.Sub(p.saidAt) >= p.every {
		p.saidAt = now
		p.sayBatch()
	}
}

func (p *runProgress) sayBatch() {
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s, %s, now at %q): %s\n",
		p.last.Job, p.last.Elapsed.Round(time.Second), countBatches(p.last.Batches), p.last.Step, p.summary())
}

// summary is what the run did so far, as its last batch said it (ratelimit.Progress.Describe):
// the result's String, or, once a step failed, as the run's line at its end says it, without the
// counts that stayed 0 because every step feeding them failed, and naming those steps. A step
// not reached yet counts 0: the line says "so far". (Not describeRecovery, whose "nothing to
// recover" would hide the failed steps.)
func (p *runProgress) summary() string {
	return p.last.Describe()
}

// countBatches says n batches: "1 batch", "2 batches".
func countBatches(n int64) string { return plural.Count(n, "batch", "batches") }

// watch starts saying, while the run in pctx lasts, what it waits for when nothing was said for
// an interval (at least minInterval: a line every nanosecond would flood stderr); stop returns
// once nothing more is written, after a batch either. It looks a few times an interval, so that
// a run that stalls just after a line is said to be waiting about an interval later, not two.
func (p *runProgress) watch(ctx, pctx context.Context) (stop func()) {
	over := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.over = true
	}
	if p.every == 0 {
		return over
	}
	wait := max(p.every, minInterval)
	p.mu.Lock()
	p.batchAt, p.saidAt = time.Now(), time.Now()
	p.mu.Unlock()
	stopWatch := stillRunning(wait/4, func(elapsed time.Duration) {
		p.mu.Lock()
		defer p.mu.Unlock()
		now := time.Now()
		if now.Sub(p.saidAt) < wait {
			return
		}
		p.saidAt = now
		if pctx.Err() != nil {
			p.sayEnding(elapsed, endedBy(ctx, p.passTimeout))
			return
		}
		if p.batchAt.After(now.Add(-wait)) && p.last.Batches > 0 {
			p.sayBatch() // batches ended since the last line, faster than one an interval
			return
		}
		p.sayWaiting(elapsed, now.Sub(p.batchAt), passBound(pctx, p.passTimeout))
	})
	return func() {
		stopWatch()
		over()
	}
}

// sayWaiting says that no batch has ended for idle, elapsed into the run: how far the run has
// got, as after a batch, what it may be waiting for, and what bounds it (passBound).
func (p *runProgress) sayWaiting(elapsed, idle time.Duration, bound string) {
	sofar, done := p.sofar(elapsed)
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s): %sno batch has ended for %s: still waiting for the database "+
		"(a lock another session holds, or a server that stopped answering; %s)\n", p.job, sofar, done, idle.Round(time.Second), bound)
}

// sayEnding says that the run, ended as why says (endedBy), has not ended yet: on a server that
// stopped answering, its statement's cancel request and the release of its lease (ratelimit's,
// which runs on past its context) wait for an answer, endWait at most. The lease is certain only
// once a batch ended (a run reports batches only while it holds its lease): before, the run may
// have been reading its cutoff or taking the lease, or been refused it.
func (p *runProgress) sayEnding(elapsed time.Duration, why string) {
	sofar, done := p.sofar(elapsed)
	lease := "the run's lease"
	if p.last.Batches == 0 {
		lease += " if it took one"
	}
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s): %s%s: still ending (cancelling its statement and giving back %s)\n",
		p.job, sofar, done, why, lease)
}

// passBound says, for a progress line of a one-shot recover, prune or doctor, what bounds the
// run in pctx (passContext) whose --pass-timeout is passTimeout (0: none): when it is cut off,
// counted from the run's start, and how long from now; else that --pass-timeout would bound it.
// The time left is rounded up to the second, and is 1s at least: rounded to the nearest second,
// the lines of the last half second before the cut-off said "0s from now". (Nothing is left only
// in the instant between the deadline and pctx's end; callers look at pctx.Err first.)
func passBound(pctx context.Context, passTimeout time.Duration) string {
	deadline, ok := pctx.Deadline()
	if passTimeout == 0 || !ok {
		return "--pass-timeout bounds the run, Ctrl-C stops it"
	}
	left := max(time.Until(deadline), time.Nanosecond)
	if rest := left % time.Second; rest > 0 {
		left += time.Second - rest
	}
	return fmt.Sprintf("it is cut off at --pass-timeout (%s), %s from now", durationtext.Operator(passTimeout), durationtext.Operator(left))
}

// endedBy says, for a progress line, what ended a run whose pass context ended: the interrupt
// (ctx's end) or --pass-timeout.
func endedBy(ctx context.Context, passTimeout time.Duration) string {
	if ctx.Err() != nil {
		return "interrupted"
	}
	return fmt.Sprintf("cut off by --pass-timeout (%s)", durationtext.Operator(passTimeout))
}

// sofar is how far the run has got, elapsed into it, for the parentheses after "so far", and
// what it did, followed by "; " (nothing before a batch ended).
func (p *runProgress) sofar(elapsed time.Duration) (sofar, done string) {
	sofar = fmt.Sprintf("%s, %s", elapsed.Round(time.Second), countBatches(p.last.Batches))
	if p.last.Batches > 0 {
		sofar += fmt.Sprintf(", now at %q", p.last.Step)
		done = p.summary() + "; "
	}
	return sofar, done
}

// lastSummary is what the run did so far, as its last batch said it (summary); false before a
// batch ended.
func (p *runProgress) lastSummary() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.summary(), p.last.Batches > 0
}

// endWait is how long a one-shot recover or prune, once cut off by --pass-timeout or
// interrupted, waits for its pass to return: for its statement's cancel and the release of its
// lease, which a live server answers in milliseconds. On a server that stopped answering they
// took 6-7 s more (the cancel request's wait, then the release's own 5 s bound), for a lease
// that could not be given back there anyway: the run exits without them.
const endWait = 2 * time.Second

// oneShot is the pool of a one-shot recover or prune, and the context its pass runs in
// (passContext). The sweeper (recover --every) has one too, for its passes, with its own context
// as pctx: a pass interrupted is waited for endWait at most, one cut off by --pass-timeout as
// long as it takes, as the next pass must not overlap it.
type oneShot struct {
	pctx context.Context
	pool *pgxpool.Pool
	// gaveUp: run gave up on a pass, which runs on in the background until the process exits.
	// It stays set: a sweeper's pass after it (its ticker was due too) returns at once.
	gaveUp bool
}

// run runs pass and waits for it, at most endWait once pctx ended. It reports whether pass
// returned: when it did not, what pass sets must not be read.
func (o *oneShot) run(pass func()) bool { return o.within(o.pctx, pass) }

// within is run bounded by ctx instead of pctx: a step on o's pool with a bound of its own (the
// sweeper's start-up checks, doctor's pooler check).
func (o *oneShot) within(ctx context.Context, pass func()) bool {
	g := grace.After(ctx, endWait)
	defer g.End()
	returned := g.Wait(pass)
	o.gaveUp = o.gaveUp || !returned
	return returned
}

// close closes the pool, the command's last step: once the pass was given up on, in the
// background (the pool's Close would wait for its statements), else as grace.CloseOnExit does.
func (o *oneShot) close() {
	if o.gaveUp {
		go o.pool.Close()
		return
	}
	grace.CloseOnExit(o.pctx, o.pool)
}

// gaveUp is the end of a one-shot recover or prune that gave up on its pass (oneShot.run): it
// prints what the pass did as far as its last batch said, unless it was nothing (nothing: what
// the job's result says then; "" when it always says something), and returns the error that
// says the lease may stay held.
func (a *app) gaveUp(ctx context.Context, o *oneShot, passTimeout time.Duration, prog *runProgress, start time.Time, nothing string) error {
	if summary, ok := prog.lastSummary(); ok && summary != nothing {
		fmt.Fprintf(a.stdout, "%s (%s)\n", summary, time.Since(start).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		a.warn("%s", leaseLeft("the interrupt")) // runApp says only "interrupted"
		return ctx.Err()
	}
	return cutOff(ctx, o.pctx, passTimeout, fmt.Errorf("%s: %w", leaseLeft("it"), o.pctx.Err()))
}

// leaseLeft says that a pass was given up on endWait after of (oneShot.run), and what it left.
func leaseLeft(of string) string {
	return fmt.Sprintf("the database did not answer within %s of %s: its statement's cancel and the release of its lease "+
		"were not waited for, and the lease may stay held, at most %s from now (a run before then is skipped)",
		durationtext.Operator(endWait), of, durationtext.Operator(ratelimit.DefaultMaintenanceLeaseTTL))
}

// passContext is ctx bounded by --pass-timeout, for a one-shot recover, prune, doctor or
// inspect (0: no bound).
func passContext(ctx context.Context, passTimeout time.Duration) (context.Context, context.CancelFunc) {
	if passTimeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, passTimeout)
}

// cutOff names --pass-timeout in err, the error of a pass run in pctx (passContext of ctx), when
// that bound ended it: the error itself says only "context deadline exceeded".
func cutOff(ctx, pctx context.Context, passTimeout time.Duration, err error) error {
	return cutOffLeaving(ctx, pctx, passTimeout, "", err)
}

// cutOffLeaving is cutOff for a run that shows nothing until it ends (doctor, inspect): cut off,
// it also says what it left undone ("the books were not checked"), where recover and prune
// print what they did. "" says nothing more, as cutOff.
func cutOffLeaving(ctx, pctx context.Context, passTimeout time.Duration, undone string, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(pctx.Err(), context.DeadlineExceeded) {
		return err
	}
	if undone != "" {
		err = fmt.Errorf("%s: %w", undone, err)
	}
	return fmt.Errorf("cut off by --pass-timeout (%s): %w", durationtext.Operator(passTimeout), err)
}
