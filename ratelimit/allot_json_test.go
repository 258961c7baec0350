package ratelimit_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// throughJSON returns a copy of g encoded and decoded, as a grant handed
// to another goroutine through a queue, or stored, comes back.
func throughJSON(t *testing.T, g ratelimit.Grant) ratelimit.Grant {
	t.Helper()
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var decoded ratelimit.Grant
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

// throughOldJSON is throughJSON as the code before LocalID encoded a grant:
// without it.
func throughOldJSON(t *testing.T, g ratelimit.Grant) ratelimit.Grant {
	t.Helper()
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, r := range fields["Reservations"].([]any) {
		delete(r.(map[string]any), "LocalID")
	}
	if b, err = json.Marshal(fields); err != nil {
		t.Fatal(err)
	}
	var decoded ratelimit.Grant
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

// A Local grant that went through JSON and comes back to the Limiter that
// admitted it settles as the grant itself would: its block charges the
// actual amount committed (nothing for one released) and the admission is
// no longer in flight. It used to report StatusUnknown, the block charging
// the estimate when returned and staying in use until then. Any other
// Limiter still reports StatusUnknown, a grant encoded without LocalID (by
// the code before it) behaves as before, and an admission settles once,
// whichever copy of its grant comes first.
func TestLocalGrantThroughJSONSettlesOnTheLimiterThatAdmittedIt(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("jsonlocal")
	elsewhere := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(elsewhere.Close)
	reserveLocal(t, elsewhere, hour, key, 1000, 1) // elsewhere holds a block of the same counter
	unknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10}

	committed := reserveLocal(t, l, hour, key, 1000, 10)
	released := reserveLocal(t, l, hour, key, 1000, 10)
	old := reserveLocal(t, l, hour, key, 1000, 10)
	raced := reserveLocal(t, l, hour, key, 1000, 10)
	if id := committed.Reservations[0].LocalID; id == "" || id == released.Reservations[0].LocalID {
		t.Fatalf("LocalIDs %q and %q: want each admission its own", id, released.Reservations[0].LocalID)
	}

	s, err := elsewhere.Commit(ctx, throughJSON(t, committed), map[string]float64{ratelimit.MetricTokens: 3})
	if err != nil || s.Reservations[0] != unknown {
		t.Fatalf("Commit on another Limiter = %+v, %v; want %+v", s, err, unknown)
	}
	s, err = l.Commit(ctx, throughJSON(t, committed), map[string]float64{ratelimit.MetricTokens: 3})
	want := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Settled: true, Reserved: 10, Actual: 3}
	if err != nil || s.Reservations[0] != want {
		t.Fatalf("Commit of the decoded grant = %+v, %v; want %+v", s, err, want)
	}
	want.Settled = false
	for _, again := range []ratelimit.Grant{committed, throughJSON(t, committed)} {
		s, err = l.Release(ctx, again, "again")
		if err != nil || s.Reservations[0] != want || !s.AlreadySettled() {
			t.Fatalf("Release after the Commit = %+v, %v; want %+v (already settled)", s, err, want)
		}
	}

	s, err = l.Release(ctx, throughJSON(t, released), "upstream failed")
	want = ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusReleased, Settled: true, Reserved: 10}
	if err != nil || s.Reservations[0] != want {
		t.Fatalf("Release of the decoded grant = %+v, %v; want %+v", s, err, want)
	}
	if s, err = l.Commit(ctx, released, nil); err != nil || s.Reservations[0].Settled || s.Reservations[0].Status != ratelimit.StatusReleased {
		t.Fatalf("Commit of the original after the decoded one's Release = %+v, %v; want it released already", s, err)
	}

	if s, err = l.Commit(ctx, throughOldJSON(t, old), map[string]float64{ratelimit.MetricTokens: 1}); err != nil || s.Reservations[0] != unknown {
		t.Fatalf("Commit of a grant encoded without LocalID = %+v, %v; want %+v", s, err, unknown)
	}

	// Copies settled at once, with the original: one settles, once.
	var settledBy atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		g := raced
		if i > 0 {
			g = throughJSON(t, raced)
		}
		wg.Go(func() {
			s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 2})
			if err != nil || s.Reservations[0].Status != ratelimit.StatusCommitted || s.Reservations[0].Actual != 2 {
				t.Errorf("concurrent Commit = %+v, %v; want committed with 2", s, err)
			}
			if s.Reservations[0].Settled {
				settledBy.Add(1)
			}
		})
	}
	wg.Wait()
	if n := settledBy.Load(); n != 1 {
		t.Fatalf("%d concurrent Commits settled the admission, want 1", n)
	}

	l.Close()
	elsewhere.Close()
	// 3 committed, 0 released, 10 for the one whose copy lost its LocalID
	// (in flight, charged at its estimate), 2 for the raced one, 1 for
	// elsewhere's.
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 16 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used 16, reserved 0", rows)
	}
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}

// What the Limiter keeps to settle decoded grants goes with the block:
// a settled admission no longer holds its block, which goes back once
// idle, and its counter is dropped (dropIdle) with nothing left of it; a
// copy settled after that is unknown, as any grant decoded elsewhere.
func TestLocalGrantThroughJSONIsForgottenWithItsBlock(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiterIdleAfter(t, 20*time.Millisecond)
	ctx := context.Background()
	key := uniqueKey("jsonforgot")
	g := reserveLocal(t, l, hour, key, 1000, 10)
	decoded := throughJSON(t, g)
	if n := l.LocalAdmissionsKept(); n != 1 {
		t.Fatalf("admissions kept = %d, want 1", n)
	}
	if s, err := l.Commit(ctx, decoded, map[string]float64{ratelimit.MetricTokens: 4}); err != nil || !s.Reservations[0].Settled {
		t.Fatalf("Commit of the decoded grant = %+v, %v; want it settled", s, err)
	}
	awaitAllotmentSets(t, l, 0, 5*time.Second) // the block went back: nothing in flight
	if n := l.LocalAdmissionsKept(); n != 0 {
		t.Fatalf("admissions kept = %d once the block went back, want 0", n)
	}
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 4 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used 4 (the actual), reserved 0", rows)
	}
	s, err := l.Commit(ctx, decoded, nil)
	unknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10}
	if err != nil || s.Reservations[0] != unknown {
		t.Fatalf("Commit once the block went back = %+v, %v; want %+v", s, err, unknown)
	}
	assertBooksBalance(t, pool, "model", key)
}

// A block keeps each request it admitted until it is returned, so it
// admits a bounded number of them: requests of tiny amounts would hardly
// spend a block, and a busy counter's block would otherwise keep every request of
// its window. Past the bound, the next request goes to a new block (or to
// the database), and every request still settles from a copy of its grant.
func TestLocalBlockAdmitsABoundedNumberOfRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := hourWindow(t, pool)
	const most = 3
	l := ratelimit.New(pool, ratelimit.WithBlockAdmissions(most),
		ratelimit.WithAllotments(ratelimit.AllotmentOptions{IdleAfter: time.Minute}))
	t.Cleanup(l.Close)
	ctx := context.Background()
	key := uniqueKey("jsonbound")
	perBlock := map[string]int{}
	var grants []ratelimit.Grant
	for range 2*most + 1 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if r := g.Reservations[0]; r.Local {
			perBlock[r.Allotment]++
		}
		grants = append(grants, g)
	}
	for block, n := range perBlock {
		if n > most {
			t.Errorf("block %s admitted %d requests, want at most %d", block, n, most)
		}
	}
	if n := l.LocalAdmissionsKept(); n > 3*most {
		t.Errorf("admissions kept = %d, want at most %d (three blocks' worth)", n, 3*most)
	}
	for _, g := range grants {
		s, err := l.Commit(ctx, throughJSON(t, g), nil)
		if err != nil || !s.Reservations[0].Settled {
			t.Fatalf("Commit of a decoded grant = %+v, %v; want it settled", s, err)
		}
	}
	l.Close()
	if rows := counterRows(t, pool, "model", key); len(rows) != 1 || rows[0].UsedValue != 2*most+1 || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v, want used %d, reserved 0", rows, 2*most+1)
	}
	assertBooksBalance(t, pool, "model", key)
}

// A LocalID's sequence can be guessed from another grant of the same
// Limiter; its random tag cannot. A copy that names an admission by the
// right instance and sequence with another tag settles nothing.
func TestLocalIDWithAGuessedTagSettlesNothing(t *testing.T) {
	t.Parallel()
	l, _, hour := localLimiter(t)
	key := uniqueKey("jsonguess")
	held := reserveLocal(t, l, hour, key, 1000, 10)
	forged := throughJSON(t, held)
	id := forged.Reservations[0].LocalID
	cut := strings.LastIndex(id, "-")
	if cut < 0 {
		t.Fatalf("LocalID %q has no tag", id)
	}
	tag := "0"
	if id[cut+1:] == tag {
		tag = "1"
	}
	forged.Reservations[0].LocalID = id[:cut+1] + tag
	unknown := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10}
	if s, err := l.Release(context.Background(), forged, "forged"); err != nil || s.Reservations[0] != unknown {
		t.Fatalf("Release of a copy with a guessed tag = %+v, %v; want %+v", s, err, unknown)
	}
	want := ratelimit.ReservationOutcome{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusCommitted, Settled: true, Reserved: 10, Actual: 4}
	if s, err := l.Commit(context.Background(), held, map[string]float64{ratelimit.MetricTokens: 4}); err != nil || s.Reservations[0] != want {
		t.Fatalf("Commit of the grant itself = %+v, %v; want %+v", s, err, want)
	}
}
