package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// On a database whose schema is behind this pgadmit's but has the tables of some steps (at
// version 5, all but the Local limits' blocks), recover and prune run the steps it can serve and
// print what they did, and say which steps failed instead of counting them 0 as if they ran and
// found nothing ("returned 0 lost allotments", "0 allotments": there was no table to look in).
func TestPartialRunsOnADatabaseBehindNameTheStepsThatFailed(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	latest := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version"))
	seedMaintenanceWork(t, pool, "behind")
	seeded := time.Now()
	const to = "5" // before 00006_allotments
	cliOK(t, "--database-url", url, "migrate", "down", "--to", to)
	behind := "the database's pgadmit schema is at version " + to + ", this pgadmit needs " + latest + ": run 'pgadmit migrate up'\n"

	out, errOut, code := cli(t, nil, "--database-url", url, "recover")
	if code != exitFailure || errOut != "pgadmit recover: "+behind {
		t.Errorf("recover at schema version %s: exit %d, stderr %q; want exit 1 and what to run", to, code, errOut)
	}
	if want := `^released 0 leases and 1 reservation; failed 1 attempt; requeued 0 async tasks; failed 0 sync tasks and 0 poison tasks; ` +
		`cleaned 0 admissions; failed steps: return lost allotments \(\d+(\.\d+)?m?s\)\n$`; !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("recover at schema version %s printed %q, want it to match %s", to, out, want)
	}

	// The 1 s windows end, and a cutoff of 1 s passes them, 2 s after they were seeded.
	time.Sleep(time.Until(seeded.Add(2100 * time.Millisecond)))
	out, errOut, code = cli(t, nil, "--database-url", url, "prune", "--older-than", "1s")
	if code != exitFailure || errOut != "pgadmit prune: "+behind {
		t.Errorf("prune at schema version %s: exit %d, stderr %q; want exit 1 and what to run", to, code, errOut)
	}
	if want := `^pruned before \S+: released 1 stale reservation; deleted 2 counter windows, 2 reservations, 0 leases, 0 events, ` +
		`0 tasks finished before \S+; failed steps: allotments \(\d+(\.\d+)?m?s\)\n$`; !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("prune at schema version %s printed %q, want it to match %s", to, out, want)
	}
	// Its progress lines after the step failed say so as the line at the end does (before, the
	// step not reached yet counts 0 "so far").
	_, errOut, _ = cli(t, nil, "--database-url", url, "prune", "--older-than", "1s", "--progress", "1ns")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if n := len(lines); n < 2 || lines[n-1] != "pgadmit prune: "+strings.TrimSuffix(behind, "\n") ||
		!strings.HasSuffix(lines[n-2], "; failed steps: allotments") || strings.Contains(lines[n-2], "0 allotments") {
		t.Errorf("prune --progress 1ns at schema version %s: stderr %q; want its last progress line to name the failed step, "+
			"without counting 0 allotments", to, errOut)
	}
}
