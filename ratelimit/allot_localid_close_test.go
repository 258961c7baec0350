package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// After Close returned its blocks, charging each admission in flight at its
// estimate, settling one changes nothing, and every answer says so: the
// grant itself reports it committed at the estimate (Settled false), a
// copy decoded from JSON reports StatusUnknown on the Limiter that admitted
// it and on any other, as it did on another Limiter before the Close; one
// settled before the Close keeps what it was charged. Nothing is kept in
// memory, the counter moves no more, and the doctor finds nothing.
func TestLocalIDSettlesAfterClose(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("idclose")
	other := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(other.Close)
	reserveLocal(t, other, hour, key, 1000, 1) // another process's block of the same counter, in flight until other closes

	original := reserveLocal(t, l, hour, key, 1000, 10)
	copied := reserveLocal(t, l, hour, key, 1000, 10)
	elsewhere := reserveLocal(t, l, hour, key, 1000, 10)
	settledBefore := reserveLocal(t, l, hour, key, 1000, 10)
	released := reserveLocal(t, l, hour, key, 1000, 10)
	unknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10}

	if s, err := other.Commit(ctx, throughJSON(t, elsewhere), map[string]float64{ratelimit.MetricTokens: 3}); err != nil || s.Reservations[0] != unknown {
		t.Fatalf("copy committed on another Limiter before Close = %+v, %v; want %+v", s, err, unknown)
	}
	if s, err := l.Commit(ctx, throughJSON(t, settledBefore), map[string]float64{ratelimit.MetricTokens: 4}); err != nil || !s.Reservations[0].Settled {
		t.Fatalf("copy committed before Close = %+v, %v; want it settled", s, err)
	}
	l.Close()
	// In flight at Close, charged at their estimate: original, copied,
	// elsewhere, released (4 x 10); settledBefore its actual, 4. other's
	// block is still open, holding its units reserved.
	const used = 44
	before := counterRows(t, pool, "model", key)
	if len(before) != 1 || before[0].UsedValue != used {
		t.Fatalf("counter %+v after Close, want used %d", before, used)
	}
	if n := l.LocalAdmissionsKept(); n != 0 {
		t.Errorf("admissions kept after Close = %d, want 0", n)
	}

	atEstimate := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Reserved: 10, Actual: 10}
	for _, c := range []struct {
		name    string
		on      *ratelimit.Limiter
		g       ratelimit.Grant
		release bool
		want    ratelimit.ReservationOutcome
	}{
		{"the grant itself, committed", l, original, false, atEstimate},
		{"the grant itself, again", l, original, false, atEstimate},
		{"the grant itself, released", l, released, true, atEstimate},
		{"a copy, on the Limiter that admitted it", l, throughJSON(t, copied), false, unknown},
		{"a copy, on another Limiter", other, throughJSON(t, copied), true, unknown},
		{"a copy settled on another Limiter before Close, again there", other, throughJSON(t, elsewhere), false, unknown},
		{"a copy settled on another Limiter before Close, on its own", l, throughJSON(t, elsewhere), false, unknown},
		{"a copy settled before Close", l, throughJSON(t, settledBefore), true, unknown},
	} {
		var s ratelimit.Settlement
		var err error
		if c.release {
			s, err = c.on.Release(ctx, c.g, "late")
		} else {
			s, err = c.on.Commit(ctx, c.g, map[string]float64{ratelimit.MetricTokens: 7})
		}
		if err != nil || len(s.Reservations) != 1 || s.Reservations[0] != c.want || !s.AlreadySettled() || len(s.Overages()) != 0 {
			t.Errorf("%s after Close = %+v, %v; want %+v, already settled, no overage", c.name, s, err, c.want)
		}
	}
	if after := counterRows(t, pool, "model", key); len(after) != 1 || after[0] != before[0] {
		t.Errorf("counter %+v after the late settles, want it unchanged: %+v", after, before)
	}
	if n := l.LocalAdmissionsKept(); n != 0 {
		t.Errorf("admissions kept after the late settles = %d, want 0", n)
	}
	other.Close()
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != used+1 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v once both closed, want used %d, reserved 0", rows, used+1)
	}
	if open := openBlocks(t, pool, key); len(open) != 0 {
		t.Errorf("%d block(s) still open once both closed", len(open))
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}

// Commits and Releases racing Close, of grants and of their copies decoded
// from JSON: each admission is charged once, and what was charged is what
// its settlements say. One that settled it (Settled true) before its block
// went back is charged its actual amount (nothing for a release); if none
// did, it was in flight at Close, charged at its estimate, and the late
// ones say so (committed at the estimate, or unknown for a copy).
func TestLocalSettlesRacingClose(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("idcloserace")
	const n, estimate, actual = 200, 1.0, 3.0
	grants := make([]ratelimit.Grant, n)
	copies := make([]ratelimit.Grant, n)
	for i := range grants {
		grants[i] = reserveLocal(t, l, hour, key, 100000, estimate)
		copies[i] = throughJSON(t, grants[i])
	}
	type answer struct {
		release bool
		o       ratelimit.ReservationOutcome
	}
	answers := make([][]answer, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range grants {
		for _, g := range []ratelimit.Grant{grants[i], copies[i]} {
			release := i%3 == 0
			wg.Go(func() {
				<-start
				var s ratelimit.Settlement
				var err error
				if release {
					s, err = l.Release(ctx, g, "raced")
				} else {
					s, err = l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: actual})
				}
				if err != nil || len(s.Reservations) != 1 {
					t.Errorf("settle racing Close = %+v, %v", s, err)
					return
				}
				mu.Lock()
				answers[i] = append(answers[i], answer{release, s.Reservations[0]})
				mu.Unlock()
			})
		}
	}
	wg.Go(func() {
		<-start
		l.Close()
	})
	close(start)
	wg.Wait()

	want := 0.0
	for i, as := range answers {
		settled, charged := 0, estimate
		for _, a := range as {
			if a.o.Settled {
				settled++
				charged = actual
				if a.release {
					charged = 0
				}
			}
		}
		if settled > 1 {
			t.Errorf("admission %d settled %d times: %+v", i, settled, as)
		}
		for _, a := range as {
			switch {
			case a.o.Status == ratelimit.StatusUnknown: // a copy, once its block went back or forgot it settled
				if a.o.Settled || a.o.Actual != 0 {
					t.Errorf("admission %d reported unknown yet settled or charged: %+v", i, as)
				}
			case a.o.Status == ratelimit.StatusReleased:
				if charged != 0 {
					t.Errorf("admission %d reported released, charged %g: %+v", i, charged, as)
				}
			case a.o.Status == ratelimit.StatusCommitted:
				if a.o.Actual != charged {
					t.Errorf("admission %d reported committed with %g, charged %g: %+v", i, a.o.Actual, charged, as)
				}
			default:
				t.Errorf("admission %d: status %q: %+v", i, a.o.Status, as)
			}
		}
		want += charged
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != want || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v after settles racing Close, want used %g (what the settlements say), reserved 0", rows, want)
	}
	if open := openBlocks(t, pool, key); len(open) != 0 {
		t.Errorf("%d block(s) still open after Close", len(open))
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}
