package ratelimit

import "time"

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

// progressOf is the report a run of job makes after each batch done (runSteps),
// summary saying what it did so far; nil without WithProgress.
func (m *Maintenance) progressOf(job string, summary func() string) func(step string) {
	report, every := m.opts.progress, m.opts.progressEvery
	if report == nil {
		return nil
	}
	start := time.Now()
	last, batches := start, int64(0)
	return func(step string) {
		batches++
		now := time.Now()
		if now.Sub(last) < every {
			return
		}
		last = now
		report(Progress{Job: job, Step: step, Batches: batches, Elapsed: now.Sub(start), Summary: summary()})
	}
}
