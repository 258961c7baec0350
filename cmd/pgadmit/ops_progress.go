package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pgadmit/pgadmit/internal/durationtext"
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
}

func newRunProgress(out io.Writer, job string, every, passTimeout time.Duration) *runProgress {
	return &runProgress{out: out, job: job, every: every, passTimeout: passTimeout}
}

// option reports the run's batches to p; nil (no option) when p says nothing.
func (p *runProgress) option() ratelimit.MaintenanceOption {
	if p.every == 0 {
		return nil
	}
	return ratelimit.WithProgress(0, p.batch)
}

// batch is told of every batch that ended, and says how far the run has got when nothing was
// said for an interval: with an interval under a batch's time (as low as 1ns), after every batch.
func (p *runProgress) batch(pr ratelimit.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.last, p.batchAt = pr, now
	if now.Sub(p.saidAt) >= p.every {
		p.saidAt = now
		p.sayBatch()
	}
}

func (p *runProgress) sayBatch() {
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s, %s, now at %q): %s\n",
		p.last.Job, p.last.Elapsed.Round(time.Second), countBatches(p.last.Batches), p.last.Step, p.last.Summary)
}

// countBatches says n batches: "1 batch", "2 batches".
func countBatches(n int64) string {
	if n == 1 {
		return "1 batch"
	}
	return fmt.Sprintf("%d batches", n)
}

// watch starts saying, while the run in pctx lasts, what it waits for when nothing was said for
// an interval (at least minInterval: a line every nanosecond would flood stderr); stop returns
// once nothing more is written. It looks a few times an interval, so that a run that stalls
// just after a line is said to be waiting about an interval later, not two.
func (p *runProgress) watch(ctx, pctx context.Context) (stop func()) {
	if p.every == 0 {
		return func() {}
	}
	wait := max(p.every, minInterval)
	p.mu.Lock()
	p.batchAt, p.saidAt = time.Now(), time.Now()
	p.mu.Unlock()
	return stillRunning(wait/4, func(elapsed time.Duration) {
		p.mu.Lock()
		defer p.mu.Unlock()
		now := time.Now()
		if now.Sub(p.saidAt) < wait {
			return
		}
		p.saidAt = now
		if pctx.Err() != nil {
			p.sayEnding(elapsed, ctx.Err() == nil)
			return
		}
		if p.batchAt.After(now.Add(-wait)) && p.last.Batches > 0 {
			p.sayBatch() // batches ended since the last line, faster than one an interval
			return
		}
		p.sayWaiting(elapsed, now.Sub(p.batchAt))
	})
}

// sayWaiting says that no batch has ended for idle, elapsed into the run: how far the run has
// got, as after a batch, and what it may be waiting for.
func (p *runProgress) sayWaiting(elapsed, idle time.Duration) {
	sofar, done := p.sofar(elapsed)
	bound := "--pass-timeout bounds the run, Ctrl-C stops it"
	if p.passTimeout > 0 {
		bound = fmt.Sprintf("it is cut off at --pass-timeout (%s)", durationtext.Operator(p.passTimeout))
	}
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s): %sno batch has ended for %s: still waiting for the database "+
		"(a lock another session holds, or a server that stopped answering; %s)\n", p.job, sofar, done, idle.Round(time.Second), bound)
}

// sayEnding says that the run, cut off by --pass-timeout (else interrupted), has not ended yet:
// on a server that stopped answering, its statement's cancel request and the release of its
// lease (ratelimit's, which runs on past its context) wait for an answer, a few seconds at most.
func (p *runProgress) sayEnding(elapsed time.Duration, cut bool) {
	sofar, done := p.sofar(elapsed)
	why := "interrupted"
	if cut {
		why = fmt.Sprintf("cut off by --pass-timeout (%s)", durationtext.Operator(p.passTimeout))
	}
	fmt.Fprintf(p.out, "pgadmit %s: so far (%s): %s%s: still ending (cancelling its statement and giving back the run's lease)\n",
		p.job, sofar, done, why)
}

// sofar is how far the run has got, elapsed into it, for the parentheses after "so far", and
// what it did, followed by "; " (nothing before a batch ended).
func (p *runProgress) sofar(elapsed time.Duration) (sofar, done string) {
	sofar = fmt.Sprintf("%s, %s", elapsed.Round(time.Second), countBatches(p.last.Batches))
	if p.last.Batches > 0 {
		sofar += fmt.Sprintf(", now at %q", p.last.Step)
		done = p.last.Summary + "; "
	}
	return sofar, done
}

// passContext is ctx bounded by --pass-timeout, for a one-shot recover or prune (0: no bound).
func passContext(ctx context.Context, passTimeout time.Duration) (context.Context, context.CancelFunc) {
	if passTimeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, passTimeout)
}

// cutOff names --pass-timeout in err, the error of a pass run in pctx (passContext of ctx), when
// that bound ended it: the error itself says only "context deadline exceeded".
func cutOff(ctx, pctx context.Context, passTimeout time.Duration, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("cut off by --pass-timeout (%s): %w", durationtext.Operator(passTimeout), err)
	}
	return err
}
