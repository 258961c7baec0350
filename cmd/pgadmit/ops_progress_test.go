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
