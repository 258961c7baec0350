package ratelimit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pgadmit/pgadmit/internal/errwalk"
	"github.com/pgadmit/pgadmit/internal/plural"
)

// A run's line (RecoveryResult's and PruneResult's String and Describe) says what the run did,
// count by count. Its steps are independent: one that failed (the server rejected it, on a
// schema behind this pgadmit's say) left the others to run, and its counts at 0, which read as
// a step that ran and found nothing; so did the steps after one that stopped the run (cut off,
// the connection lost), which never ran. So a count that stayed 0, every step feeding it failed
// or not run, is left out, and the line ends by naming the steps that failed (their errors say
// why) and saying how many did not run. Without a failed step the line says every count: it is
// String.

// tally is one count of a run's line: its value and its noun, singular and plural ("lease",
// "leases": plural.Count writes them), and the steps of the run that add to it (as StepError and
// Progress name them); or a remark of its clause, text without a count ("finished tasks kept",
// in one, many empty), said only beside a count.
type tally struct {
	one, many string
	n         int64
	steps     []string
}

// clause is a part of a run's line: a verb and its counts, joined by sep.
type clause struct {
	verb, sep string
	tallies   []tally
}

// stepsFailed are the steps of a run that failed, in order, and those it did not run, after the
// last that failed (it stopped there).
type stepsFailed struct {
	failed, notRun []string
}

// ran reports whether step ran and did not fail.
func (s stepsFailed) ran(step string) bool {
	return !slices.Contains(s.failed, step) && !slices.Contains(s.notRun, step)
}

// failedStepsIn finds the steps that err, the error of a run of job, names as failed, and those
// it says the run did not reach: the *StepErrors it holds, however joined and wrapped, of job
// (or of no job: one made by hand).
func failedStepsIn(job string, err error) stepsFailed {
	var found stepsFailed
	errwalk.Each(err, func(e *StepError) {
		if e.Job != "" && e.Job != job {
			return
		}
		if !slices.Contains(found.failed, e.Step) {
			found.failed = append(found.failed, e.Step)
		}
		found.notRun = append(found.notRun, e.NotRun...)
	})
	return found
}

// describeClauses writes clauses as a run's line does, leaving out the counts that stayed 0
// because every step feeding them failed or did not run, and then says which failed, and how
// many did not run.
func describeClauses(clauses []clause, s stepsFailed) string {
	var parts []string
	for _, c := range clauses {
		var said []string
		counted := false // a remark alone ("finished tasks kept") is not said
		for _, t := range c.tallies {
			if t.n == 0 && len(t.steps) > 0 && !slices.ContainsFunc(t.steps, s.ran) {
				continue
			}
			if t.many != "" {
				said, counted = append(said, plural.Count(t.n, t.one, t.many)), true
			} else {
				said = append(said, t.one)
			}
		}
		if counted {
			parts = append(parts, c.verb+" "+strings.Join(said, c.sep))
		}
	}
	if n := len(s.failed); n > 0 {
		parts = append(parts, "failed steps: "+strings.Join(s.failed, ", "))
		switch last := s.failed[n-1]; len(s.notRun) {
		case 0:
		case 1:
			parts = append(parts, "not run: the step after "+last)
		default:
			parts = append(parts, fmt.Sprintf("not run: the %d steps after %s", len(s.notRun), last))
		}
	}
	return strings.Join(parts, "; ")
}
