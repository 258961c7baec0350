package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func TestReserveCommitSettlesActualAmounts(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key, model := uniqueKey("key"), uniqueKey("model")
	limits := []ratelimit.Limit{
		window("api_key", key, "requests", 10, 1),
		window("api_key", key, "tokens", 10000, 500),
		concurrent("model", model, 2),
	}
	grant, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if len(grant.Reservations) != 2 || len(grant.Leases) != 1 {
		t.Fatalf("grant = %+v, want 2 reservations and 1 lease", grant)
	}
	if got := liveLeases(t, pool, "model", model); got != 1 {
		t.Fatalf("live leases after reserve = %d, want 1", got)
	}
	assertCounter(t, pool, key, "requests", 0, 1)
	assertCounter(t, pool, key, "tokens", 0, 500)

	settlement, err := l.Commit(ctx, grant, map[string]float64{"tokens": 420})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	want := ratelimit.Settlement{
		Reservations: []ratelimit.ReservationOutcome{
			{ID: grant.Reservations[0].ID, Metric: "requests", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 1, Actual: 1},
			{ID: grant.Reservations[1].ID, Metric: "tokens", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 500, Actual: 420},
		},
		LeasesReleased: 1,
	}
	if diff := cmp.Diff(want, settlement); diff != "" {
		t.Fatalf("Commit settlement (-want +got):\n%s", diff)
	}
	assertCounter(t, pool, key, "requests", 1, 0)
	assertCounter(t, pool, key, "tokens", 420, 0)
	if got := liveLeases(t, pool, "model", model); got != 0 {
		t.Fatalf("live leases after commit = %d, want 0", got)
	}
	assertBooksBalance(t, pool, "api_key", key)
}

func TestCommitAboveEstimateIsRecordedAndReported(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("key")
	lim := window("api_key", key, "tokens", 1000, 500)
	lim.Window = pgtest.WindowWithRoom(t, pool, time.Minute, 5*time.Second) // the second Reserve must meet the first's window
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	settlement, err := l.Commit(ctx, grant, map[string]float64{"tokens": 1700})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	overages := settlement.Overages()
	if len(overages) != 1 || overages[0].Overage() != 1200 {
		t.Fatalf("Overages = %+v, want one of 1200", overages)
	}
	// Recorded in full, past the limit: the window now refuses everything.
	assertCounter(t, pool, key, "tokens", 1700, 0)
	lim.Amount = 1
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
	var exceeded *ratelimit.ExceededError
	if !errors.As(err, &exceeded) || !exceeded.Retryable || exceeded.Used != 1700 {
		t.Fatalf("Reserve after overage: err = %v, want a retryable *ExceededError with Used 1700", err)
	}
	assertBooksBalance(t, pool, "api_key", key)
}

func TestSettleIsIdempotentAndSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type step struct {
		name   string
		settle func(l *ratelimit.Limiter, g ratelimit.Grant) (ratelimit.Settlement, error)
	}
	commit := step{"commit", func(l *ratelimit.Limiter, g ratelimit.Grant) (ratelimit.Settlement, error) {
		return l.Commit(ctx, g, map[string]float64{"tokens": 300})
	}}
	release := step{"release", func(l *ratelimit.Limiter, g ratelimit.Grant) (ratelimit.Settlement, error) {
		return l.Release(ctx, g, "client_cancelled")
	}}
	for _, tc := range []struct {
		first, second step
		wantStatus    string
		wantUsed      float64
	}{
		{commit, commit, ratelimit.StatusCommitted, 300},
		{commit, release, ratelimit.StatusCommitted, 300},
		{release, commit, ratelimit.StatusReleased, 0},
		{release, release, ratelimit.StatusReleased, 0},
	} {
		t.Run(tc.first.name+" then "+tc.second.name, func(t *testing.T) {
			t.Parallel()
			l, pool := setup(t)
			key, model := uniqueKey("key"), uniqueKey("model")
			grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 500), concurrent("model", model, 1)})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			first, err := tc.first.settle(l, grant)
			if err != nil || first.AlreadySettled() {
				t.Fatalf("first %s: settlement %+v, err %v; want a change", tc.first.name, first, err)
			}
			second, err := tc.second.settle(l, grant)
			if err != nil {
				t.Fatalf("second %s: %v", tc.second.name, err)
			}
			if !second.AlreadySettled() || second.LeasesAlreadyReleased != 1 || second.Reservations[0].Status != tc.wantStatus {
				t.Fatalf("second %s = %+v, want a no-op reporting status %s", tc.second.name, second, tc.wantStatus)
			}
			assertCounter(t, pool, key, "tokens", tc.wantUsed, 0)
			assertBooksBalance(t, pool, "api_key", key)
		})
	}
}

func TestReleaseFreesTheSlotAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	limits := []ratelimit.Limit{concurrent("model", uniqueKey("model"), 1)}
	grant, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Reserve(ctx, "", "", limits); !errors.Is(err, ratelimit.ErrExceeded) {
		t.Fatalf("second Reserve: err = %v, want ErrExceeded", err)
	}
	if _, err := l.Release(ctx, grant, "done"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := l.Reserve(ctx, "", "", limits); err != nil {
		t.Fatalf("Reserve after release: %v", err)
	}
}

func TestRenewLeases(t *testing.T) {
	t.Parallel()
	var clock testClock
	l, _ := clocked(pgtest.NewPool(t), &clock)
	ctx := context.Background()
	short := concurrent("model", uniqueKey("model"), 5)
	short.LeaseTTL = time.Minute // long enough that no load lets it lapse before the first renewal
	long := concurrent("model", uniqueKey("model"), 5)
	long.LeaseTTL = time.Hour
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{short, long})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	renewed, err := l.RenewLeases(ctx, grant.Leases)
	if err != nil || len(renewed) != 2 || !renewed[1].ExpiresAt.After(grant.Leases[1].ExpiresAt) {
		t.Fatalf("RenewLeases of live leases = %+v, %v; want both renewed with a later expiry", renewed, err)
	}
	clock.pass(renewed[0].ExpiresAt) // the short lease lapses, the hour-long one lives
	renewed, err = l.RenewLeases(ctx, grant.Leases)
	var lost *ratelimit.LeaseLostError
	if !errors.Is(err, ratelimit.ErrLeaseLost) || !errors.As(err, &lost) {
		t.Fatalf("RenewLeases after expiry: err = %v, want ErrLeaseLost", err)
	}
	if diff := cmp.Diff([]string{grant.Leases[0].ID}, lost.LeaseIDs); diff != "" {
		t.Fatalf("lost leases (-want +got):\n%s", diff)
	}
	if len(renewed) != 1 || renewed[0].ID != grant.Leases[1].ID {
		t.Fatalf("renewed = %+v, want only the live lease", renewed)
	}
	released, err := l.ReleaseLeases(ctx, grant.Leases, "done")
	if err != nil || released != 2 {
		t.Fatalf("ReleaseLeases = %d, %v; want 2 (the lapsed one is closed too)", released, err)
	}
	if _, err := l.RenewLeases(ctx, grant.Leases[1:]); !errors.Is(err, ratelimit.ErrLeaseLost) {
		t.Fatalf("RenewLeases after release: err = %v, want ErrLeaseLost", err)
	}
}

// A refusal by the last limit leaves every other limit's row exactly as it was.
func TestRefusalChangesNoOtherRow(t *testing.T) {
	t.Parallel()
	for _, last := range []string{"window", "concurrent"} {
		t.Run("refused by "+last, func(t *testing.T) {
			t.Parallel()
			l, pool := setup(t)
			ctx := context.Background()
			key, model, full := uniqueKey("key"), uniqueKey("model"), uniqueKey("full")
			others := []ratelimit.Limit{
				window("api_key", key, "requests", 100, 1),
				window("api_key", key, "tokens", 100000, 500),
				concurrent("model", model, 100),
			}
			lastLimit := window("team", full, "requests", 1, 1)
			if last == "concurrent" {
				lastLimit = concurrent("team", full, 1)
			}
			// Windows of an hour (or a few minutes more) with a minute left:
			// a new window would add counter rows of its own.
			hour := hourWindow(t, pool)
			for i := range others {
				if others[i].Metric != ratelimit.MetricConcurrent {
					others[i].Window = hour
				}
			}
			if lastLimit.Metric != ratelimit.MetricConcurrent {
				lastLimit.Window = hour
			}
			// Make every row exist, then fill the last limit.
			if _, err := l.Reserve(ctx, "", "", others); err != nil {
				t.Fatalf("warm-up Reserve: %v", err)
			}
			if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lastLimit}); err != nil {
				t.Fatalf("filling Reserve: %v", err)
			}
			beforeCounters := counterRows(t, pool, "api_key", key)
			beforeRows := rowCounts(t, pool)
			beforeLeases := liveLeases(t, pool, "model", model)

			_, err := l.Reserve(ctx, "", "", append(others, lastLimit))
			var exceeded *ratelimit.ExceededError
			if !errors.As(err, &exceeded) || exceeded.ScopeKey != full {
				t.Fatalf("Reserve: err = %v, want *ExceededError on team:%s", err, full)
			}
			if diff := cmp.Diff(beforeCounters, counterRows(t, pool, "api_key", key)); diff != "" {
				t.Errorf("counters changed by a refused reservation (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeRows, rowCounts(t, pool)); diff != "" {
				t.Errorf("row counts changed by a refused reservation (-before +after):\n%s", diff)
			}
			if got := liveLeases(t, pool, "model", model); got != beforeLeases {
				t.Errorf("live leases = %d, want %d", got, beforeLeases)
			}
		})
	}
}

func TestExceededErrorExplainsTheRefusal(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	// Half a minute, or a few minutes more: the refused Reserve must meet the first's window.
	win := pgtest.WindowWithRoom(t, pool, 30*time.Second, 5*time.Second)
	secs := int(win / time.Second)
	key, model := uniqueKey("key"), uniqueKey("model")
	meta := map[string]any{"tier": "free"}
	full := ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key, Name: "Acme prod", Metadata: meta},
		Metric: "tokens", Limit: 1000, Amount: 600, Window: win, Policy: "free-tier"}
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{full}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}

	_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{full})
	var got *ratelimit.ExceededError
	if !errors.As(err, &got) {
		t.Fatalf("Reserve: err = %v, want *ExceededError", err)
	}
	if got.RetryAfter < time.Second || got.RetryAfter > win || got.ResetAt.Unix()%int64(secs) != 0 {
		t.Errorf("RetryAfter = %s, ResetAt = %s; want 1s..%s until a %d s boundary", got.RetryAfter, got.ResetAt, win, secs)
	}
	want := ratelimit.ExceededError{
		ScopeType: "api_key", ScopeKey: key, ScopeName: "Acme prod", ScopeMetadata: meta, Metric: "tokens",
		Limit: 1000, Amount: 600, Current: 600, Used: 0, Reserved: 600, Projected: 1200,
		WindowSeconds: secs, Policy: "free-tier", Retryable: true,
	}
	if diff := cmp.Diff(want, *got, cmpopts.IgnoreFields(ratelimit.ExceededError{}, "ResetAt", "RetryAfter", "Message")); diff != "" {
		t.Errorf("ExceededError (-want +got):\n%s", diff)
	}

	for name, limit := range map[string]ratelimit.Limit{
		"amount above limit": window("api_key", key, "requests", 5, 6),
		"zero limit":         window("api_key", key, "images", 0, 1),
		"concurrent above":   {Scope: ratelimit.Scope{Type: "model", Key: model}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 2},
	} {
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{limit})
		if !errors.As(err, &got) || got.Retryable || got.RetryAfter != 0 {
			t.Errorf("%s: err = %#v, want a non-retryable *ExceededError", name, err)
		} else if got.ScopeMetadata != nil {
			t.Errorf("%s: ScopeMetadata = %#v, want nil (the Scope had none)", name, got.ScopeMetadata)
		}
	}

	slot := concurrent("model", model, 1)
	slot.LeaseTTL = time.Hour
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{slot}); err != nil {
		t.Fatalf("Reserve slot: %v", err)
	}
	_, err = l.Reserve(ctx, "", "", []ratelimit.Limit{slot})
	if !errors.As(err, &got) || !got.Retryable || got.RetryAfter != 5*time.Second || got.Current != 1 {
		t.Errorf("full concurrent limit: err = %#v, want retryable, RetryAfter 5s (capped), Current 1", err)
	}
}

func TestZeroAmountReservesNothing(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
		window("api_key", uniqueKey("key"), "tokens", 10, 0),
		{Scope: ratelimit.Scope{Type: "model", Key: "m"}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 0},
	})
	if err != nil || !grant.Empty() {
		t.Fatalf("Reserve of zero amounts = %+v, %v; want an empty grant", grant, err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Fatalf("rows written for zero amounts (-before +after):\n%s", diff)
	}
}

func TestCheckConsumesNothing(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("key")
	limits := []ratelimit.Limit{window("api_key", key, "requests", 2, 1), concurrent("model", "m", 1)}
	limits[0].Window = pgtest.WindowWithRoom(t, pool, time.Minute, 5*time.Second) // the last Check must see the Reserves' window
	for range 3 {
		if err := l.Check(ctx, limits); err != nil {
			t.Fatalf("Check: %v", err)
		}
	}
	if got := rowCounts(t, pool); got.Counters != 0 || got.Leases != 0 {
		t.Fatalf("Check wrote rows: %+v", got)
	}
	for range 2 {
		if _, err := l.Reserve(ctx, "", "", limits[:1]); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	var exceeded *ratelimit.ExceededError
	if err := l.Check(ctx, limits); !errors.As(err, &exceeded) || exceeded.Current != 2 || !exceeded.Retryable {
		t.Fatalf("Check of a full window: err = %v, want a retryable *ExceededError with Current 2", err)
	}
}

func TestWindowsOfDifferentLengthAreSeparateCounters(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("key")
	perMinute := window("api_key", key, "tokens", 1000, 400)
	perDay := window("api_key", key, "tokens", 5000, 400)
	perDay.Window = 24 * time.Hour
	if _, err := l.Reserve(ctx, "", "", []ratelimit.Limit{perMinute, perDay}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	rows := counterRows(t, pool, "api_key", key)
	if len(rows) != 2 || rows[0].ReservedValue != 400 || rows[1].ReservedValue != 400 {
		t.Fatalf("counters = %+v, want two rows of 400", rows)
	}
}

// An admission for a task or attempt that cannot hold capacity is refused
// with a typed error: no reservation, no lease, no counter value changes.
func TestReserveRefusesTasksThatCannotHoldCapacity(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	finished, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "gateway-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.FinishTask(ctx, finished.ID, finished.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}
	running, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "gateway-1"})
	if err != nil {
		t.Fatal(err)
	}
	const missing = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		name              string
		taskID, attemptID string
		want              error
	}{
		{"unknown task", missing, "", ratelimit.ErrUnknownTask},
		{"finished task", finished.ID, "", ratelimit.ErrTaskFinished},
		{"finished attempt", finished.ID, finished.AttemptID, ratelimit.ErrTaskFinished},
		{"attempt without its task", "", running.AttemptID, ratelimit.ErrInvalidInput},
		{"unknown attempt", running.ID, missing, ratelimit.ErrUnknownTask},
		{"attempt of another task", running.ID, finished.AttemptID, ratelimit.ErrUnknownTask},
	} {
		key := uniqueKey("key")
		before := rowCounts(t, pool)
		_, err := l.Reserve(ctx, tc.taskID, tc.attemptID,
			[]ratelimit.Limit{window("api_key", key, "requests", 10, 1), concurrent("model", key, 1)})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		after := rowCounts(t, pool)
		if after.Reservations != before.Reservations || after.Leases != before.Leases {
			t.Errorf("%s: reservations %d -> %d, leases %d -> %d; want none written", tc.name,
				before.Reservations, after.Reservations, before.Leases, after.Leases)
		}
		for _, c := range counterRows(t, pool, "api_key", key) {
			if c.UsedValue != 0 || c.ReservedValue != 0 {
				t.Errorf("%s: counter %+v changed", tc.name, c)
			}
		}
	}
	if _, err := l.Reserve(ctx, running.ID, running.AttemptID, []ratelimit.Limit{window("api_key", uniqueKey("key"), "requests", 10, 1)}); err != nil {
		t.Errorf("running task and attempt: %v", err)
	}
}

func TestReserveInCallersTransaction(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("key")
	limits := []ratelimit.Limit{window("api_key", key, "requests", 10, 1), concurrent("model", key, 1)}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratelimit.New(pool).WithTx(tx).Reserve(ctx, "", "", limits); err != nil {
		t.Fatalf("Reserve in tx: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rowCounts(t, pool); got.Reservations != 0 || got.Leases != 0 {
		t.Fatalf("rolled-back admission left rows: %+v", got)
	}

	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grant, err := ratelimit.New(pool).WithTx(tx).Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve in tx: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rowCounts(t, pool); got.Reservations != 1 || got.Leases != 1 || len(grant.Reservations) != 1 {
		t.Fatalf("committed admission: rows %+v, grant %+v", got, grant)
	}
	assertCounter(t, pool, key, "requests", 0, 1)
}

// assertCounter checks the current window of one api_key counter.
func assertCounter(t *testing.T, conn db.DBTX, key, metric string, used, reserved float64) {
	t.Helper()
	for _, row := range counterRows(t, conn, "api_key", key) {
		if row.Metric == metric {
			if row.UsedValue != used || row.ReservedValue != reserved {
				t.Fatalf("api_key:%s %s: used=%v reserved=%v, want used=%v reserved=%v", key, metric, row.UsedValue, row.ReservedValue, used, reserved)
			}
			return
		}
	}
	t.Fatalf("api_key:%s %s: no counter row", key, metric)
}

func TestAttachLinksTheGrantToAnAttempt(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "gateway-1"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	key := uniqueKey("key")
	grant, err := l.Reserve(ctx, task.ID, "", []ratelimit.Limit{window("api_key", key, "tokens", 1000, 500), concurrent("model", key, 1)})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	attached, err := l.Attach(ctx, task.AttemptID, grant)
	if err != nil || attached.AttemptID != task.AttemptID {
		t.Fatalf("Attach = %+v, %v; want the grant with AttemptID %s", attached, err, task.AttemptID)
	}
	if _, err := l.Attach(ctx, "123e4567-e89b-12d3-a456-426614174000", grant); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("Attach to a missing attempt: err = %v, want ErrUnknownTask", err)
	}
	gone := grant
	gone.Reservations = append([]ratelimit.Reservation(nil), grant.Reservations...)
	gone.Reservations[0].ID = "123e4567-e89b-12d3-a456-426614174000"
	if _, err := l.Attach(ctx, task.AttemptID, gone); !errors.Is(err, ratelimit.ErrUnknownGrant) {
		t.Fatalf("Attach of a missing reservation: err = %v, want ErrUnknownGrant", err)
	}
	if _, err := l.Commit(ctx, attached, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	assertCounter(t, pool, key, "tokens", 500, 0)
}

// Attach keeps a grant with its task: to an attempt of another task or one
// that no longer runs it links nothing; a grant taken without a task joins
// the attempt's, so that finishing the task settles it.
func TestAttachKeepsAGrantWithItsTask(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	mine, other := startSync(t, l, time.Minute), startSync(t, l, time.Minute)
	key := uniqueKey("key")
	// An hour's window (or a few minutes more) with a minute left: both
	// Reserves must meet on one counter, which assertCounter reads (a
	// minute's could end between them).
	limits := hourLimits(t, pool, window("api_key", key, "tokens", 1000, 100), concurrent("model", key, 5))
	owned, err := l.Reserve(ctx, mine.ID, "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Attach(ctx, other.AttemptID, owned); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("Attach to another task's attempt: err = %v, want ErrUnknownTask", err)
	}
	taskless, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	// A grant whose rows are of two tasks: refused whole, the taskless
	// half included.
	mixed := taskless
	mixed.Leases = owned.Leases
	if _, err := l.Attach(ctx, other.AttemptID, mixed); !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Fatalf("Attach of a grant with another task's lease: err = %v, want ErrUnknownTask", err)
	}
	adopted, err := l.Attach(ctx, other.AttemptID, taskless)
	if err != nil || adopted.TaskID != other.ID || adopted.AttemptID != other.AttemptID {
		t.Fatalf("Attach of a taskless grant = %+v, %v; want TaskID %s, AttemptID %s", adopted, err, other.ID, other.AttemptID)
	}
	finished, err := l.FinishTask(ctx, other.ID, other.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
	if err != nil {
		t.Fatalf("FinishTask: %v", err)
	}
	if finished.ReleasedReservations != 1 || finished.ReleasedLeases != 1 {
		t.Fatalf("FinishTask released %d reservations and %d leases, want the adopted grant's 1 and 1 (and none of the refused attaches)", finished.ReleasedReservations, finished.ReleasedLeases)
	}
	assertCounter(t, pool, key, "tokens", 0, 100) // mine's reservation is still open
	if _, err := l.Attach(ctx, other.AttemptID, owned); !errors.Is(err, ratelimit.ErrTaskFinished) {
		t.Fatalf("Attach to a finished attempt: err = %v, want ErrTaskFinished", err)
	}
	if _, err := l.Attach(ctx, mine.AttemptID, owned); err != nil {
		t.Fatalf("Attach to its own task's attempt: %v", err)
	}
}

// A grant that names another counter than its reservation draws on (a
// window start or scope altered since Reserve returned it) settles nothing
// of that reservation: it stays open, reported with its status, reserved.
// That is not a call that found everything already settled.
func TestSettlingAGrantThatNamesAnotherCounterIsNoNoOp(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("k")
	// One window of an hour or a few minutes more, with a minute left: both
	// grants must charge the one tokens counter that assertCounter reads (a
	// minute's could end between them).
	one := hourLimits(t, pool, window("api_key", key, "tokens", 100, 10), window("api_key", key, "requests", 100, 1))
	for _, limits := range [][]ratelimit.Limit{
		one[:1], // pgadmit_settle_one
		one,     // pgadmit_settle
	} {
		grant, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatal(err)
		}
		altered := grant
		altered.Reservations = slices.Clone(grant.Reservations)
		altered.Reservations[0].WindowStart = grant.Reservations[0].WindowStart.Add(-time.Minute)
		got, err := l.Commit(ctx, altered, nil)
		if err != nil {
			t.Fatalf("Commit(%d limits) of an altered grant: %v", len(limits), err)
		}
		if got.Reservations[0].Settled || got.Reservations[0].Status != ratelimit.StatusReserved || got.AlreadySettled() {
			t.Errorf("Commit(%d limits) of an altered grant = %+v, AlreadySettled %v; want its first reservation reported open, and no no-op",
				len(limits), got, got.AlreadySettled())
		}
		if _, err := l.Commit(ctx, grant, nil); err != nil {
			t.Fatalf("Commit of the grant as Reserve returned it: %v", err)
		}
	}
	assertCounter(t, pool, key, "tokens", 20, 0)
	assertBooksBalance(t, pool, "api_key", key)
}
