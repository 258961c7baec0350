package promadmit

import (
	"context"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Operations of Recover and Prune, as the operation label.
const (
	OpRecover = "recover"
	OpPrune   = "prune"
)

// Recover runs mt.Recover and observes it (ObserveRecover). On Metrics not
// made with New it runs nothing and returns a *ratelimit.ValidationError
// on "Metrics".
func (m *Metrics) Recover(ctx context.Context, mt *ratelimit.Maintenance) (ratelimit.RecoveryResult, error) {
	if !m.made() {
		return ratelimit.RecoveryResult{}, m.notMade("Recover")
	}
	start := time.Now()
	res, err := mt.Recover(ctx)
	m.ObserveRecover(res, err, time.Since(start))
	return res, err
}

// Prune runs mt.Prune and observes it (ObservePrune). On Metrics not made
// with New it runs nothing and returns a *ratelimit.ValidationError on
// "Metrics".
func (m *Metrics) Prune(ctx context.Context, mt *ratelimit.Maintenance, olderThan time.Duration) (ratelimit.PruneResult, error) {
	if !m.made() {
		return ratelimit.PruneResult{}, m.notMade("Prune")
	}
	start := time.Now()
	res, err := mt.Prune(ctx, olderThan)
	m.ObservePrune(res, err, time.Since(start))
	return res, err
}

// ObserveRecover records a Recover run that took took: its duration (with
// result skipped when another process was recovering) and what it gave
// back. For callers that run Recover themselves.
func (m *Metrics) ObserveRecover(res ratelimit.RecoveryResult, err error, took time.Duration) {
	if !m.made() {
		return
	}
	m.observeCall(OpRecover, maintenanceResult(err, res.Skipped), took)
	for kind, n := range recoveredKinds(res) {
		m.recovered.WithLabelValues(kind).Add(float64(max(n, 0))) // a counter panics on a negative Add
	}
}

// recoveredKinds is what res gave back, by the kind label of
// pgadmit_recovered_total.
func recoveredKinds(res ratelimit.RecoveryResult) map[string]int64 {
	return map[string]int64{
		"leases":          res.ReleasedConcurrencyLeases,
		"reservations":    res.ReleasedRateReservations,
		"failed_attempts": res.FailedAttempts,
		"failed_tasks":    res.FailedTasks,
		"requeued_tasks":  res.RequeuedAsyncTasks,
		"poison_tasks":    res.FailedPoisonTasks,
		"task_admissions": res.CleanedTaskAdmissions,
		"allotments":      res.ReturnedAllotments,
	}
}

// ObservePrune records a Prune run that took took: its duration (with
// result skipped when another process was pruning) and what it released
// or deleted. For callers that run Prune themselves.
func (m *Metrics) ObservePrune(res ratelimit.PruneResult, err error, took time.Duration) {
	if !m.made() {
		return
	}
	m.observeCall(OpPrune, maintenanceResult(err, res.Skipped), took)
	for kind, n := range prunedKinds(res) {
		m.pruned.WithLabelValues(kind).Add(float64(max(n, 0))) // a counter panics on a negative Add
	}
}

// prunedKinds is what res released or deleted, by the kind label of
// pgadmit_pruned_total.
func prunedKinds(res ratelimit.PruneResult) map[string]int64 {
	return map[string]int64{
		"stale_reservations": res.ReleasedStaleReservations,
		"counters":           res.Counters,
		"reservations":       res.Reservations,
		"leases":             res.Leases,
		"allotments":         res.Allotments,
		"events":             res.Events,
		"tasks":              res.Tasks,
	}
}

// maintenanceResult is the result label of a Recover or Prune run: skipped
// when another process held its lease.
func maintenanceResult(err error, skipped bool) string {
	if err == nil && skipped {
		return ResultSkipped
	}
	return result(err)
}
