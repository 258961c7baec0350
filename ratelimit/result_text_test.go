package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A result that a failed call returned (its zero value) says that the call did nothing: code
// that logs the result after an error showed a prune "pruned before 0001-01-01T00:00:00Z" and
// a doctor whose check never ran "the books balance". A result the call filled still says
// what it found.
func TestZeroResultsSayNothingRan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		got     string
		want    string
		mustNot []string
	}{
		{"PruneResult{}", ratelimit.PruneResult{}.String(), "prune did nothing", []string{"0001-01-01", "pruned before"}},
		{"Report{}", ratelimit.Report{}.String(), "the books were not checked", []string{"balance"}},
		{"RecoveryResult{}", ratelimit.RecoveryResult{}.String(), "released 0 leases and 0 reservations", nil},
	} {
		if !strings.Contains(c.got, c.want) {
			t.Errorf("%s.String() = %q; want it to say %q", c.name, c.got, c.want)
		}
		for _, bad := range c.mustNot {
			if strings.Contains(c.got, bad) {
				t.Errorf("%s.String() = %q; says %q", c.name, c.got, bad)
			}
		}
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if s := (ratelimit.PruneResult{Cutoff: at}).String(); !strings.HasPrefix(s, "pruned before 2026-03-01T12:00:00Z: released 0 stale reservations;") {
		t.Errorf("a prune that read its cutoff and deleted nothing: %q", s)
	}
	if s := (ratelimit.Report{CheckedAt: at}).String(); s != "doctor: the books balance" {
		t.Errorf("a check that found nothing: %q", s)
	}
}

// TestZeroReportIsNotOK: the zero Report, which Doctor returns with its
// error, checked nothing, so code that reads OK without the error must not
// take a failed Doctor for books that balance.
func TestZeroReportIsNotOK(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		report ratelimit.Report
		want   bool
	}{
		{"the zero Report", ratelimit.Report{}, false},
		{"a check that found nothing", ratelimit.Report{CheckedAt: at}, true},
		{"a check that found a problem", ratelimit.Report{CheckedAt: at, Problems: []ratelimit.Problem{{}}}, false},
	} {
		if got := c.report.OK(); got != c.want {
			t.Errorf("%s: OK() = %v, want %v", c.name, got, c.want)
		}
	}
}
