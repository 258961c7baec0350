package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// What the README promises of a refusal, exactly: it changes no counter
// value, reservation or lease. A refused admission of one window limit,
// alone, writes nothing at all; one of several limits may leave an empty counter
// row (nothing used, nothing reserved) for a window that had no row yet,
// which Prune removes with the window.
func TestRefusalWritesNoValueButMayLeaveEmptyWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	key := uniqueKey("k")
	// A minute, or a few minutes more: it fills a window, then expects a refusal in it.
	win := pgtest.WindowWithRoom(t, pool, time.Minute, 5*time.Second)
	inWin := func(l ratelimit.Limit) ratelimit.Limit { l.Window = win; return l }

	// One window limit that can never fit: no row at all.
	before := rowCounts(t, pool)
	_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{inWin(window("api_key", key, "tokens", 10, 11))})
	if !errors.Is(err, ratelimit.ErrExceeded) {
		t.Fatalf("Reserve = %v, want ErrExceeded", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Fatalf("a refused one-limit admission wrote rows (-before +after):\n%s", diff)
	}

	// Several limits, refused by the last: the windows that had no row get
	// one, empty; no value, reservation or lease changes.
	full := inWin(window("team", key, "requests", 1, 1))
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{full}); err != nil {
		t.Fatalf("Reserve(fill): %v", err)
	}
	before = rowCounts(t, pool)
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{
		inWin(window("api_key", key, "requests", 100, 1)), inWin(window("api_key", key, "tokens", 1000, 10)), concurrent("model", key, 5), full,
	})
	if !errors.Is(err, ratelimit.ErrExceeded) {
		t.Fatalf("Reserve = %v, want ErrExceeded", err)
	}
	want := before
	want.Counters += 2
	if diff := cmp.Diff(want, rowCounts(t, pool)); diff != "" {
		t.Fatalf("rows after a refused admission of several limits (-want +got):\n%s", diff)
	}
	var windows []string
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue != 0 || c.ReservedValue != 0 {
			t.Errorf("counter %s holds used=%v reserved=%v after a refusal", c.Metric, c.UsedValue, c.ReservedValue)
		}
		windows = append(windows, c.Metric)
	}
	if diff := cmp.Diff([]string{"requests", "tokens"}, windows); diff != "" {
		t.Fatalf("api_key windows (-want +got):\n%s", diff)
	}
	if live := liveLeases(t, pool, "model", key); live != 0 {
		t.Fatalf("%d live leases after a refusal", live)
	}
	assertDoctorOK(t, pool)

	// Once their window ended, prune takes the empty rows with the full one.
	clock.pass(time.Now().Add(2 * win))
	got, err := m.Prune(ctx, time.Minute)
	if err != nil || got.Counters != 3 || got.Reservations != 1 {
		t.Fatalf("Prune = %+v, %v; want the 3 windows and the one reservation", got, err)
	}
}

// A refused admission of one window limit decided in a combined batch (with
// concurrent Reserve calls of the same Limiter) may leave its window's
// counter row behind, empty, as an admission of several limits may: the
// batch locks every counter it names, creating those that have no row,
// before it decides. The README used to promise that such a refusal writes
// nothing at all. No value, reservation or lease changes.
func TestCombinedRefusalOfOneLimitMayLeaveEmptyWindows(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	before := rowCounts(t, pool)
	_, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{
		{Limits: []ratelimit.Limit{window("api_key", key, "tokens", 10, 11)}},
		{Limits: []ratelimit.Limit{window("api_key", key, "requests", 10, 11)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !errors.Is(err, ratelimit.ErrExceeded) {
			t.Fatalf("admission %d: err = %v, want ErrExceeded", i, err)
		}
	}
	want := before
	want.Counters += 2
	if diff := cmp.Diff(want, rowCounts(t, pool)); diff != "" {
		t.Fatalf("rows after refused one-limit admissions of one batch (-want +got):\n%s", diff)
	}
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue != 0 || c.ReservedValue != 0 {
			t.Errorf("counter %s holds used=%v reserved=%v after a refusal", c.Metric, c.UsedValue, c.ReservedValue)
		}
	}
	assertDoctorOK(t, pool)
}
