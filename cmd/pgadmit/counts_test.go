package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// printDoctor counts the problems as English does, in its lines and its error: "1 problem",
// "2 problems" (it said "1 problem(s) found"), and "1 of these is" capacity recover gives back.
func TestPrintDoctorCountsAsEnglish(t *testing.T) {
	t.Parallel()
	held := ratelimit.Problem{Kind: ratelimit.ProblemReservationOfFinishedTask, ScopeType: "api_key", ScopeKey: "k", Metric: "requests",
		TaskID: "t", TaskStatus: "succeeded", RowID: "r", ExpectedText: "0", ActualText: "1"}
	for _, c := range []struct {
		rep              ratelimit.Report
		wantOut, wantErr string
	}{
		{ratelimit.Report{CheckedAt: time.Now(), Problems: []ratelimit.Problem{held}},
			"doctor: 1 problem\n", "1 problem found"},
		{ratelimit.Report{CheckedAt: time.Now(), Problems: []ratelimit.Problem{held, held}, Truncated: true},
			"doctor: 2 problems (truncated)\n", "2 or more problems found"},
	} {
		var out bytes.Buffer
		err := printDoctor(&out, c.rep)
		first, _, _ := bytes.Cut(out.Bytes(), []byte("\n"))
		if got := string(first) + "\n"; got != c.wantOut {
			t.Errorf("printDoctor printed first %q, want %q", got, c.wantOut)
		}
		if err == nil || err.Error() != c.wantErr {
			t.Errorf("printDoctor = %v, want %q", err, c.wantErr)
		}
	}
	var out bytes.Buffer
	_ = printDoctor(&out, ratelimit.Report{CheckedAt: time.Now(), Problems: []ratelimit.Problem{held}})
	if want := "\n1 of these is capacity that finished tasks"; !bytes.Contains(out.Bytes(), []byte(want)) {
		t.Errorf("printDoctor printed %q, want it to say %q", out.String(), want)
	}
}
