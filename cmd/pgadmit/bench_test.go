package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/servertime"
)

// A bench interrupted before any workload finished ran no check: it does not say that all of them
// passed just above "interrupted: no workload finished".
func TestPrintBenchChecksOfNoWorkloadClaimsNothing(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printBenchChecks(&out, nil, 1)
	if strings.Contains(out.String(), "all checks passed") {
		t.Errorf("printBenchChecks of no workload:\n%s", out.String())
	}
}

// With --rounds, a check that is off says which round it was off in, as the table's rows do.
func TestPrintBenchChecksNamesTheRound(t *testing.T) {
	t.Parallel()
	check := func(got int64) []bench.Check {
		return []bench.Check{{Name: "window limit 100: admitted", Want: 100, Got: got, OK: got == 100}}
	}
	results := []bench.Result{
		{Name: "W4 exactness", Round: 1, Checks: check(100), OK: true},
		{Name: "W4 exactness", Round: 2, Checks: check(101), Errors: 1, FirstError: "boom"},
	}
	var out strings.Builder
	if printBenchChecks(&out, results, 2) {
		t.Error("printBenchChecks passed a check that is off")
	}
	for _, want := range []string{
		"W4 round 1/2: window limit 100: admitted: 100 (want 100) ok\n",
		"W4 round 2/2: window limit 100: admitted: 101 (want 100) OFF\n",
		"W4 round 2/2: 1 error, first: boom\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printBenchChecks does not print %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printBenchChecks(&out, results[:1], 1)
	if !strings.Contains(out.String(), "\nW4: window limit 100: admitted: 100 (want 100) ok\n") {
		t.Errorf("printBenchChecks of one round:\n%s", out.String())
	}
}

// A workload whose operations are several calls (T1) says each call's p50 and p99 after its
// row, before how its calls were combined.
func TestBenchRowNotesSayEachCallsLatency(t *testing.T) {
	t.Parallel()
	r := bench.Result{Steps: []bench.Step{{Name: "create", P50us: 812, P99us: 2100}, {Name: "heartbeat", P50us: 402, P99us: 950}},
		ReservesPerStatement: 2, SettlesPerStatement: 1}
	want := "  (p50/p99 µs per call: create 812/2100, heartbeat 402/950; combined: "
	if got := benchRowNotes(r); !strings.HasPrefix(got, want) {
		t.Errorf("benchRowNotes = %q, want it to begin %q", got, want)
	}
}

// The header counts workers and instances in the singular when there is one.
func TestBenchWhoPlural(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		workers, instances int
		want               string
	}{
		{1, 1, "1 worker"},
		{2, 1, "2 workers"},
		{4, 2, "4 workers in 2 instances"},
	} {
		if got := benchWho(c.workers, c.instances); got != c.want {
			t.Errorf("benchWho(%d, %d) = %q, want %q", c.workers, c.instances, got, c.want)
		}
	}
}

// docs/cli.md's --json row of bench names every field of the report, of each result, check, steadiness
// and waits row (server_time's settings are elided there, "..."): scripts read them, and a
// field they cannot find documented is one they cannot rely on. It used to leave out each
// result's "ok", "ops", "seconds", "workers" and "first_error".
func TestBenchJSONFieldsAreInTheCLIDoc(t *testing.T) {
	t.Parallel()
	_, section, _ := strings.Cut(cliDoc(t), "\n## `pgadmit bench`\n")
	_, row, _ := strings.Cut(section, "| `--json FILE` |")
	row, _, _ = strings.Cut(row, "\n")
	if row == "" {
		t.Fatal("docs/cli.md: no --json row in the bench section")
	}
	// part is the row from the field that holds an object's list to the next such field.
	part := func(from, to string) string {
		_, after, ok := strings.Cut(row, `"`+from+`": [`)
		if !ok {
			t.Errorf("docs/cli.md's bench --json row has no %q list", from)
		}
		before, _, _ := strings.Cut(after, `"`+to+`"`)
		return before
	}
	for _, c := range []struct {
		v    any
		text string
	}{
		{benchReport{}, row},
		{bench.Result{}, part("results", "checks") + `"checks"`},
		{bench.Step{}, part("steps", "checks")},
		{bench.Check{}, part("checks", "steadiness")},
		{bench.Steadiness{}, part("steadiness", "server_time")},
		{workloadWaitsJSON{}, part("waits", "wal_pct` is")},
		{workloadServerTimeJSON{}, part("workloads", "waits")},
		{servertime.Statement{}, part("statements", "waits")},
	} {
		typ := reflect.TypeOf(c.v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(c.text, `"`+name+`"`) {
				t.Errorf("docs/cli.md's bench --json row does not name %s's field %q", typ, name)
			}
		}
	}
	// A field that is left out when it does not apply (omitempty: hot_percent when no batch was
	// hot, though the table prints "0% hot") is one a script must default: the row says which.
	_, leftOut, ok := strings.Cut(row, "left out when they do not apply")
	leftOut, _, _ = strings.Cut(leftOut, ";")
	if !ok {
		t.Error("docs/cli.md's bench --json row does not say which fields are left out when they do not apply")
	}
	for _, v := range []any{benchReport{}, bench.Result{}, bench.Check{}, serverTimeReport{}, servertime.Status{}, servertime.Statement{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if strings.Contains(opts, "omitempty") && !strings.Contains(leftOut, "`"+name+"`") {
				t.Errorf("docs/cli.md's bench --json row does not say that %s's field %q is left out when it does not apply", typ, name)
			}
		}
	}
}
