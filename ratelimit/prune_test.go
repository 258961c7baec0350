package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// secondWindow is a requests window of a second (history that ends
// quickly, for Prune to find) of 100 on the api_key counter of key.
func secondWindow(key string, amount float64) ratelimit.Limit {
	w := window("api_key", key, ratelimit.MetricRequests, 100, amount)
	w.Window = time.Second
	return w
}

// TestPruneDeletesHistoryNeverLiveState builds, within a second, history
// that ends quickly (1 s windows, 1 s leases, a finished task, a reservation
// nobody settles in a 1 s window) next to live state (a window that lasts a
// year, a live lease, a running task), moves the clock past the history's
// end by the retention, and prunes in batches of one row.
func TestPruneDeletesHistoryNeverLiveState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithPruneBatchSize(1))
	_, withEvents := clocked(pool, &clock, ratelimit.WithPruneBatchSize(1), ratelimit.WithPruneEvents(true))
	reserve := func(taskID string, limits ...ratelimit.Limit) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, taskID, "", limits)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return g
	}
	lease := func(key string, ttl time.Duration) ratelimit.Limit {
		c := concurrent("model", key, 10)
		c.LeaseTTL = ttl
		return c
	}
	yearly := window("api_key", "long", ratelimit.MetricTokens, 1e9, 10)
	yearly.Window = ratelimit.MaxWindow

	running := startSync(t, l, time.Hour)
	// A: a committed 1 s window (history), a yearly window committed but still
	// live, and a lease released by the commit (history).
	a := reserve(running.ID, secondWindow("A", 1), yearly, lease("M", time.Second))
	if _, err := l.Commit(ctx, a, map[string]float64{ratelimit.MetricTokens: 7}); err != nil {
		t.Fatalf("Commit(A): %v", err)
	}
	// B: one 1 s window holding a reservation nobody settles (stale once the
	// window ended: released, then pruned with its window) and a committed
	// one, plus a lease that lapses unreleased (history).
	var b1 ratelimit.Grant
	retries := int64(0)
	for ; ; retries++ {
		key := uniqueKey("B")
		b1 = reserve(running.ID, secondWindow(key, 1), lease("M", time.Second))
		b2 := reserve(running.ID, secondWindow(key, 2))
		if b1.Reservations[0].WindowStart.Equal(b2.Reservations[0].WindowStart) {
			if _, err := l.Commit(ctx, b2, nil); err != nil {
				t.Fatalf("Commit(B2): %v", err)
			}
			break
		}
		if retries == 5 {
			t.Fatalf("two reservations never landed in one 1 s window")
		}
		if _, err := l.Release(ctx, b1, "retry"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, err := l.Release(ctx, b2, "retry"); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	// C: a released 1 s window (history).
	c := reserve(running.ID, secondWindow("C", 1))
	if _, err := l.Release(ctx, c, "client_gone"); err != nil {
		t.Fatalf("Release(C): %v", err)
	}
	// A live lease, and a finished task whose events are history.
	reserve(running.ID, lease("M2", time.Hour))
	done := startSync(t, l, 0)
	finished, err := l.FinishTask(ctx, done.ID, done.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}

	const retention = time.Second
	historyEnds := latest(a.Reservations[0].ResetAt, a.Leases[0].ExpiresAt, b1.Leases[0].ExpiresAt, b1.Reservations[0].ResetAt,
		c.Reservations[0].ResetAt, finished.Task.FinishedAt)
	clock.pass(historyEnds.Add(retention))

	ignoreCutoff := cmpopts.IgnoreFields(ratelimit.PruneResult{}, "Cutoff", "TaskCutoff")
	got, err := m.Prune(ctx, retention)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	// A retry of B above (its two reservations straddled a window boundary)
	// left two released reservations in two 1 s windows and a released lease.
	want := ratelimit.PruneResult{
		ReleasedStaleReservations: 1,             // B's unsettled one
		Counters:                  3 + 2*retries, // A's, B's and C's 1 s windows
		Reservations:              4 + 2*retries, // A's committed 1 s one, B's two (the stale one, just released), C's released one
		Leases:                    2 + retries,   // A's, released by the commit; B's, lapsed unreleased
	}
	if diff := cmp.Diff(want, got, ignoreCutoff); diff != "" {
		t.Fatalf("Prune (-want +got):\n%s", diff)
	}
	if !got.Cutoff.After(historyEnds) {
		t.Fatalf("cutoff %s is not after the history's end %s", got.Cutoff, historyEnds)
	}

	// Events go only when asked for.
	clock.pass(got.Cutoff.Add(retention + retention + 100*time.Millisecond))
	got, err = withEvents.Prune(ctx, retention)
	if err != nil {
		t.Fatalf("Prune(WithPruneEvents): %v", err)
	}
	if diff := cmp.Diff(ratelimit.PruneResult{Events: 2}, got, ignoreCutoff); diff != "" { // task.running, task.completed
		t.Fatalf("Prune(WithPruneEvents) (-want +got):\n%s", diff)
	}
	got, err = withEvents.Prune(ctx, retention)
	if err != nil || !cmp.Equal(ratelimit.PruneResult{}, got, ignoreCutoff) {
		t.Fatalf("third Prune = %+v, %v; want nothing left", got, err)
	}

	// Live state is whole: the yearly window and its committed reservation,
	// the live lease, the running task's event; and the books still balance.
	after := rowCounts(t, pool)
	wantRows := dbtest.TableRowCountsRow{Tasks: 2, Attempts: 2, Events: 1, Counters: 1, Reservations: 1, Leases: 1}
	if diff := cmp.Diff(wantRows, after); diff != "" {
		t.Fatalf("rows after prune (-want +got):\n%s", diff)
	}
	if s := summary(t, pool); s.ReservationsOpen != 0 || s.LeasesLive != 1 || s.CountersReserved != 0 || s.CountersUsed != 7 {
		t.Fatalf("live state after prune = %+v", s)
	}
	assertDoctorOK(t, pool)
}

// A damaged counter (less reserved than its open reservations, which the
// doctor reports) makes the server reject the release of its stale
// reservation. The stale reservations of healthy counters in the same batch
// are still released (the batch is retried in halves), the steps after it
// still run, so the healthy windows are pruned, and the error names the
// step and carries the server's reason.
func TestPruneGoesOnPastADamagedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var clock testClock
	l, m := clocked(pool, &clock)
	for range 5 {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(uniqueKey("healthy"), 1)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Never settled, all in one batch of the release: three on healthy
	// counters, one on the counter about to be damaged.
	for range 2 {
		if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(uniqueKey("stale"), 1)}); err != nil {
			t.Fatal(err)
		}
	}
	damaged := uniqueKey("damaged")
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(damaged, 5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{secondWindow(uniqueKey("stale"), 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := testq.OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
		ReservedDelta: -3, ScopeType: "api_key", ScopeKey: damaged, Metric: ratelimit.MetricRequests,
	}); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute)

	res, err := m.Prune(ctx, time.Second)
	if err == nil || !strings.Contains(err.Error(), "release stale reservations") {
		t.Fatalf("Prune: %v, want the error of the step releasing stale reservations", err)
	}
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("Prune: %v, want the server's check_violation", err)
	}
	if res.ReleasedStaleReservations != 3 || res.Counters != 8 || res.Reservations != 8 {
		t.Errorf("released %d stale reservations, pruned %d counter windows and %d reservations, want the 3 healthy stale ones, and the 8 healthy windows and reservations: %+v",
			res.ReleasedStaleReservations, res.Counters, res.Reservations, res)
	}
	if rows := counterRows(t, pool, "api_key", damaged); len(rows) != 1 {
		t.Errorf("the damaged counter: %+v, want it kept", rows)
	}
}

// The ledger of a window longer than the retention (a month's budget,
// pruned with a cutoff of a second) has not ended, and Prune reads none of
// it, however many rows it holds, while it deletes the ended windows of
// another length. It used to walk every reservation whose window began
// before the cutoff, page after page, to delete none of them.
func TestPruneReadsNoLedgerOfAWindowStillRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, pages := countingPool(t, "PruneReservations")
	var clock testClock
	l, m := clocked(pool, &clock, ratelimit.WithPruneBatchSize(10))
	month := window("api_key", uniqueKey("month"), ratelimit.MetricTokens, 1e12, 1)
	month.Window = 30 * 24 * time.Hour
	limits := [][]ratelimit.Limit{}
	for range 100 {
		limits = append(limits, []ratelimit.Limit{month})
	}
	for range 5 {
		second := window("api_key", uniqueKey("second"), ratelimit.MetricRequests, 100, 1)
		second.Window = time.Second
		limits = append(limits, []ratelimit.Limit{second})
	}
	for _, ls := range limits {
		g, err := l.Reserve(ctx, "", "", ls)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(time.Minute)

	res, err := m.Prune(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reservations != 5 {
		t.Errorf("pruned %d reservations, want the 5 of the ended 1 s windows", res.Reservations)
	}
	// One page per window length, each short: 5 rows of 1 s windows, none of the month's.
	if n := pages.n.Load(); n != 2 {
		t.Errorf("%d PruneReservations pages in batches of 10, want 2 (the month's 100 rows unread)", n)
	}
	assertBooksBalance(t, pool, "api_key", month.Scope.Key)
}
