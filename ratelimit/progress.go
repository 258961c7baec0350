package ratelimit

import (
	"slices"
	"time"
)

// Progress says how far a Recover or Prune run has got (WithProgress).
type Progress struct {
	// Job is "recover" or "prune".
	Job string
	// Step is the step whose batch the run has just done (it may have
	// been the step's last), named as in the run's errors ("reclaim
	// expired tasks", "reservations", ...).
	Step string
	// Batches counts the batches (statements or transactions) the run has
	// done so far: those that committed, or read that there was nothing
	// more to do; not one that rolled back whole (it waited on a lock past
	// WithMaintenanceLockTimeout).
	Batches int64
	// Elapsed is the time since the run took its lease.
	Elapsed time.Duration
	// Summary is what the run has done so far, as its result's String says
	// it (RecoveryResult, PruneResult).
	Summary string
	// Recovery is what a Recover run (Job "recover") has done so far, and
	// Prune what a Prune run (Job "prune") has; the other is zero.
	// Summary is its String.
	Recovery RecoveryResult
	Prune    PruneResult
	// Failed names the steps that have ended with an error so far (the
	// step of this batch too, when it did), in order, as the run's
	// *StepErrors will: the counts a failed step feeds stayed where its
	// error left them, 0 if it came first, which Summary does not tell
	// from a step that ran and found nothing: Describe does.
	Failed []string
}

// Describe says what the run has done so far as its result's Describe
// says a run's error (RecoveryResult.Describe, PruneResult.Describe): once
// a step failed (Failed), it leaves out the counts that stayed 0 because
// every step feeding them failed, and ends naming those steps. The steps
// not reached yet count 0, as in Summary, which it is while no step failed
// (and for a Progress of no job). A Recover run whose first step failed,
// after its second step's batch (its Example's output):
//
//	released 0 leases and 2 reservations; failed 0 attempts; cleaned 0 admissions; returned 0 lost allotments; failed steps: reclaim expired tasks
func (p Progress) Describe() string {
	if len(p.Failed) == 0 {
		return p.Summary
	}
	s := stepsFailed{failed: p.Failed}
	switch p.Job {
	case jobRecover:
		return p.Recovery.describe(s)
	case jobPrune:
		return p.Prune.describe(s)
	}
	return p.Summary
}

// WithProgress makes Recover and Prune call report with their progress
// after a batch, at most once per every (after every batch when every is 0
// or less), on the goroutine that runs them: for an operator watching a
// long run, a first prune after months of history, say. A run that ends
// before every has passed reports nothing. A nil report reports nothing.
func WithProgress(every time.Duration, report func(Progress)) MaintenanceOption {
	return func(o *maintenanceOptions) {
		o.progressEvery, o.progress = max(every, 0), report
	}
}

// progressOf is the report a run of job makes after each batch done
// (runSteps, with the steps that failed so far), sofar filling in what
// it did so far (Summary, and Recovery or Prune); nil without
// WithProgress.
func (m *Maintenance) progressOf(job string, sofar func(*Progress)) func(step string, failed []string) {
	report, every := m.opts.progress, m.opts.progressEvery
	if report == nil {
		return nil
	}
	start := time.Now()
	last, batches := start, int64(0)
	return func(step string, failed []string) {
		batches++
		now := time.Now()
		if now.Sub(last) < every {
			return
		}
		last = now
		p := Progress{Job: job, Step: step, Batches: batches, Elapsed: now.Sub(start), Failed: slices.Clone(failed)}
		sofar(&p)
		report(p)
	}
}
