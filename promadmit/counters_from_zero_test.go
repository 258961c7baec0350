package promadmit_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What Recover and Prune give back is counted from 0, every kind from New
// on: a counter series that first appears at n, after the run that gave n
// back (a Recover at start-up, taking back the leases of the instance that
// died), has no earlier sample, so rate and increase never see those n.
func TestRecoveredAndPrunedStartAtZero(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistered(t)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgadmit_recovered_total What Recover gave back, by kind (leases, reservations, failed_attempts, failed_tasks, requeued_tasks, poison_tasks, task_admissions, allotments).
# TYPE pgadmit_recovered_total counter
pgadmit_recovered_total{kind="allotments"} 0
pgadmit_recovered_total{kind="failed_attempts"} 0
pgadmit_recovered_total{kind="failed_tasks"} 0
pgadmit_recovered_total{kind="leases"} 0
pgadmit_recovered_total{kind="poison_tasks"} 0
pgadmit_recovered_total{kind="requeued_tasks"} 0
pgadmit_recovered_total{kind="reservations"} 0
pgadmit_recovered_total{kind="task_admissions"} 0
# HELP pgadmit_pruned_total What Prune released or deleted, by kind (stale_reservations, counters, reservations, leases, allotments, events, tasks).
# TYPE pgadmit_pruned_total counter
pgadmit_pruned_total{kind="allotments"} 0
pgadmit_pruned_total{kind="counters"} 0
pgadmit_pruned_total{kind="events"} 0
pgadmit_pruned_total{kind="leases"} 0
pgadmit_pruned_total{kind="reservations"} 0
pgadmit_pruned_total{kind="stale_reservations"} 0
pgadmit_pruned_total{kind="tasks"} 0
`), "pgadmit_recovered_total", "pgadmit_pruned_total"); err != nil {
		t.Error(err)
	}
}
