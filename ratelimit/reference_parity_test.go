package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A committed reservation records the reason the reference store records,
// 'success', so that a DBA's query of gateway_rate_limit_reservations by
// reason reads the same on both; a release records its caller's reason, an
// empty one as NULL. Both settle paths: a grant of one reservation
// (pgadmit_settle_one) and one with several and a lease (pgadmit_settle).
func TestCommitRecordsTheReferenceReason(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("reason")
	requests := window("api_key", key, ratelimit.MetricRequests, 10, 1)
	tokens := window("api_key", key, ratelimit.MetricTokens, 1000, 100)
	slot := concurrent("model", key, 5)
	reserve := func(limits ...ratelimit.Limit) ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, "", "", limits)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return g
	}
	if _, err := l.Commit(ctx, reserve(requests), nil); err != nil {
		t.Fatalf("Commit of one reservation: %v", err)
	}
	if _, err := l.Commit(ctx, reserve(requests, tokens, slot), map[string]float64{ratelimit.MetricTokens: 80}); err != nil {
		t.Fatalf("Commit of a grant: %v", err)
	}
	if _, err := l.Release(ctx, reserve(requests), ""); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := l.Release(ctx, reserve(requests, tokens), "upstream_failed"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got, err := testq.ReservationsByReason(ctx, pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
	if err != nil {
		t.Fatalf("ReservationsByReason: %v", err)
	}
	want := []dbtest.ReservationsByReasonRow{
		{Status: ratelimit.StatusCommitted, Reason: "success", Reservations: 3},
		{Status: ratelimit.StatusReleased, Reason: "", Reservations: 1},
		{Status: ratelimit.StatusReleased, Reason: "upstream_failed", Reservations: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reservations by status and reason (-want +got):\n%s", diff)
	}
}

// An actual amount of 0 is charged as 0: only a metric absent from the
// actual amounts is charged at its estimate. The reference store charges
// the estimate for any actual amount of 0 or less (it reads 0 as "not
// reported"); a gateway that passes 0 for usage its upstream did not report
// must leave that metric out of the map instead (README, Semantics: Zero).
func TestCommitOfZeroChargesZero(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("zero")
	limits := hourLimits(t, pool,
		window("api_key", key, ratelimit.MetricTokens, 1000, 100),
		window("api_key", key, ratelimit.MetricRequests, 10, 1))
	limits[1].Window = limits[0].Window // one window each, read together below
	g, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	s, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: 0})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	actual := map[string]float64{}
	for _, o := range s.Reservations {
		if !o.Settled || o.Status != ratelimit.StatusCommitted {
			t.Fatalf("outcome %+v; want committed by this call", o)
		}
		actual[o.Metric] = o.Actual
	}
	used := map[string]float64{}
	for _, c := range counterRows(t, pool, "api_key", key) {
		used[c.Metric] += c.UsedValue
		if c.ReservedValue != 0 {
			t.Errorf("%s: %v still reserved", c.Metric, c.ReservedValue)
		}
	}
	want := map[string]float64{ratelimit.MetricTokens: 0, ratelimit.MetricRequests: 1} // requests absent: its estimate
	if diff := cmp.Diff(want, actual); diff != "" {
		t.Errorf("committed actual amounts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, used); diff != "" {
		t.Errorf("used in the window (-want +got):\n%s", diff)
	}
	assertBooksBalance(t, pool, "api_key", key)
}

// A refusal of a concurrent limit reports no window (WindowSeconds 0, where
// the reference store reported its default window, 60), and a refusal that
// retrying cannot cure no RetryAfter, as ExceededError documents.
func TestRefusalFiguresWhereTheReferenceDiffers(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	ctx := context.Background()
	key := uniqueKey("figures")
	refusal := func(limits ...ratelimit.Limit) *ratelimit.ExceededError {
		t.Helper()
		_, err := l.Reserve(ctx, "", "", limits)
		var e *ratelimit.ExceededError
		if !errors.As(err, &e) {
			t.Fatalf("Reserve(%+v) = %v; want an *ExceededError", limits, err)
		}
		return e
	}
	slot := concurrent("model", key, 1)
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{slot})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	t.Cleanup(func() { _, _ = l.Release(ctx, g, "") })
	if e := refusal(slot); !e.Retryable || e.WindowSeconds != 0 || e.RetryAfter < time.Second || e.RetryAfter > 5*time.Second {
		t.Errorf("full scope: %+v; want retryable, WindowSeconds 0, RetryAfter 1s to 5s", e)
	}
	slot.Amount = 2
	if e := refusal(slot); e.Retryable || e.WindowSeconds != 0 || e.RetryAfter != 0 {
		t.Errorf("amount above the concurrent limit: %+v; want not retryable, WindowSeconds 0, RetryAfter 0", e)
	}
	if e := refusal(window("api_key", key, ratelimit.MetricTokens, 10, 11)); e.Retryable || e.WindowSeconds != 60 || e.RetryAfter != 0 {
		t.Errorf("amount above the window limit: %+v; want not retryable, WindowSeconds 60, RetryAfter 0", e)
	}
}
