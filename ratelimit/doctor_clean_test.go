package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Doctor that finds nothing costs one round trip, as one that finds
// problems does (two the first time: pgx's pipelined prepare), and its
// CheckedAt is the time of the snapshot it read: the statement's now(),
// or the Maintenance's clock.
func TestCleanDoctorIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	pool, m := tracedPool(t)
	ctx := context.Background()
	dbBefore, err := testq.OpsNow(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	doctor := ratelimit.NewMaintenance(pool)
	for pass := range 2 {
		var report ratelimit.Report
		c := m.count(func() { report, err = doctor.Doctor(ctx) })
		if err != nil {
			t.Fatalf("Doctor: %v", err)
		}
		if !report.OK() || report.Truncated {
			t.Fatalf("pass %d: %s, want the books to balance", pass, report)
		}
		if c.traced > 2 || c.wire > 2 || (pass == 1 && (c.traced != 1 || c.wire != 1)) {
			t.Errorf("pass %d: a clean Doctor cost %s, want one round trip (two cold: prepare and statement)", pass, c)
		}
		dbAfter, err := testq.OpsNow(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if report.CheckedAt.Before(dbBefore) || report.CheckedAt.After(dbAfter) {
			t.Errorf("pass %d: CheckedAt %v, want the statement's now(), between %v and %v", pass, report.CheckedAt, dbBefore, dbAfter)
		}
		dbBefore = dbAfter
	}

	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	report, err := ratelimit.NewMaintenance(pool, ratelimit.WithMaintenanceClock(func() time.Time { return at })).Doctor(ctx)
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	if !report.OK() || !report.CheckedAt.Equal(at) {
		t.Errorf("Doctor on a clock at %v: CheckedAt %v, %s; want the clock's time and the books balanced", at, report.CheckedAt, report)
	}
}
