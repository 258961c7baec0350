package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The line a run cut off (or interrupted) says while it ends tells the release of the run's lease
// as certain only once a batch ended, which only a run that holds its lease reports: before
// that the run may still have been reading its cutoff or taking its lease, or been refused it,
// and the line said "giving back the run's lease" all the same.
func TestRunEndingSaysTheLeaseOnlyWhenTheRunTookIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		last ratelimit.Progress
		why  string // endedBy's
		want string
	}{
		{"before a batch, cut off", ratelimit.Progress{}, "cut off by --pass-timeout (3s)",
			"pgadmit prune: so far (4s, 0 batches): cut off by --pass-timeout (3s): still ending (cancelling its statement " +
				"and giving back the run's lease if it took one)\n"},
		{"before a batch, interrupted", ratelimit.Progress{}, "interrupted",
			"pgadmit prune: so far (4s, 0 batches): interrupted: still ending (cancelling its statement " +
				"and giving back the run's lease if it took one)\n"},
		{"after a batch", ratelimit.Progress{Job: "prune", Step: "counters", Batches: 2, Summary: "pruned before ..."}, "cut off by --pass-timeout (3s)",
			`pgadmit prune: so far (4s, 2 batches, now at "counters"): pruned before ...; cut off by --pass-timeout (3s): ` +
				"still ending (cancelling its statement and giving back the run's lease)\n"},
	} {
		var out bytes.Buffer
		p := newRunProgress(&out, "prune", time.Second, 3*time.Second)
		p.last = c.last
		p.sayEnding(4*time.Second, c.why)
		if out.String() != c.want {
			t.Errorf("%s: %q\nwant %q", c.name, out.String(), c.want)
		}
		if c.last.Batches == 0 && strings.Contains(out.String(), "giving back the run's lease)") {
			t.Errorf("%s: says that it gives back a lease it may never have taken: %q", c.name, out.String())
		}
	}
}

// A progress line after a step failed says what the run did so far as the run's line at its end
// does: it leaves out a count that stayed 0 because every step feeding it failed, and names the
// failed steps. It said the result's String, "0 allotments" for a prune whose allotments step the
// server rejected (a schema behind), as if the step had run and found nothing; so did the line a
// run given up on prints (lastSummary). Steps not reached yet still count 0: the line says "so
// far". Without a failed step the line is the result's String, as before.
func TestProgressLineNamesTheStepsFailedSoFar(t *testing.T) {
	t.Parallel()
	cutoff := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	pruned := ratelimit.PruneResult{Cutoff: cutoff, Counters: 5}
	recovered := ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 2}
	for _, c := range []struct {
		name          string
		last          ratelimit.Progress
		want, notWant string // in the line
	}{
		{"prune, allotments failed", ratelimit.Progress{Job: "prune", Step: "events", Batches: 3, Summary: pruned.String(), Prune: pruned,
			Failed: []string{"allotments"}},
			"deleted 5 counter windows, 0 reservations, 0 leases, 0 events, finished tasks kept; failed steps: allotments\n", "0 allotments"},
		{"recover, reclaim failed", ratelimit.Progress{Job: "recover", Step: "release expired leases", Batches: 3, Summary: recovered.String(),
			Recovery: recovered, Failed: []string{"reclaim expired tasks"}},
			"released 2 leases and 0 reservations; failed 0 attempts; cleaned 0 admissions; returned 0 lost allotments; " +
				"failed steps: reclaim expired tasks\n", "async tasks"},
		{"prune, none failed", ratelimit.Progress{Job: "prune", Step: "events", Batches: 3, Summary: pruned.String(), Prune: pruned},
			pruned.String() + "\n", "failed steps"},
	} {
		var out bytes.Buffer
		p := newRunProgress(&out, c.last.Job, time.Nanosecond, 0)
		p.batch(c.last)
		line := out.String()
		if !strings.HasSuffix(line, c.want) || strings.Contains(line, c.notWant) {
			t.Errorf("%s: %q\nwant it to end %q, without %q", c.name, line, c.want, c.notWant)
		}
		if summary, ok := p.lastSummary(); !ok || !strings.HasSuffix(summary+"\n", c.want) || strings.Contains(summary, c.notWant) {
			t.Errorf("%s: lastSummary %q, %v\nwant it to end %q, without %q", c.name, summary, ok, c.want, c.notWant)
		}
	}
}
