package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter or Maintenance made from a nil pool (pgxpool.New's result when
// its error went unchecked), a nil Executor or a nil transaction fails
// every operation with a *ValidationError naming it: they used to panic
// inside pgx (or, combined, fail with an untyped "a combined batch
// panicked"), and CheckPooler too. So does an Executor of one's own that
// embeds a nil pool, connection or transaction: New panicked on it,
// reading the pool's or the connection's settings.
func TestNilConnFailsWithValidationError(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	const id = "123e4567-e89b-12d3-a456-426614174000"
	key := uniqueKey("nilconn")
	limits := []ratelimit.Limit{window("api_key", key, "requests", 10, 1), concurrent("model", key, 2)}
	local := window("model", key, ratelimit.MetricTokens, 1000, 1)
	local.Local = true
	grant := ratelimit.Grant{Reservations: []ratelimit.Reservation{{ID: id}}, Leases: []ratelimit.Lease{{ID: id}}}
	want := func(name, field string, err error) {
		t.Helper()
		var invalid *ratelimit.ValidationError
		if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != field {
			t.Errorf("%s: err = %v, want a *ValidationError on %s", name, err, field)
		}
	}
	inTx := ratelimit.New(pool)
	defer inTx.Close()
	same := func(l *ratelimit.Limiter) func() *ratelimit.Limiter {
		t.Cleanup(l.Close)
		return func() *ratelimit.Limiter { return l }
	}
	limiters := map[string]func() *ratelimit.Limiter{
		"New(nil)":                        same(ratelimit.New(nil)),
		"New(nil pool)":                   same(ratelimit.New((*pgxpool.Pool)(nil))),
		"New(nil pool, WithoutCombining)": same(ratelimit.New((*pgxpool.Pool)(nil), ratelimit.WithoutCombining())),
		"New(own nil pool)":               same(ratelimit.New(ownPool{})),
		"New(&own nil pool)":              same(ratelimit.New(&ownPool{})),
		"New(own nil conn)":               same(ratelimit.New(ownConn{})),
		"New(own nil pool conn)":          same(ratelimit.New(struct{ *pgxpool.Conn }{})),
		"New(own nil Executor)":           same(ratelimit.New(struct{ ratelimit.Executor }{})),
		"New(own, nested, nil pool)":      same(ratelimit.New(struct{ ownPool }{})),
		// A new one per operation: a transaction takes its operations in
		// lock order, failed ones included.
		"WithTx(nil)":        func() *ratelimit.Limiter { return inTx.WithTx(nil) },
		"WithTx(own nil tx)": func() *ratelimit.Limiter { return inTx.WithTx(struct{ pgx.Tx }{}) },
	}
	for name, mk := range limiters {
		field := "conn"
		if strings.HasPrefix(name, "WithTx(") {
			field = "tx"
		}
		_, err := mk().Reserve(ctx, "", "", limits)
		want(name+" Reserve", field, err)
		_, err = mk().Reserve(ctx, "", "", []ratelimit.Limit{local})
		want(name+" Reserve of a Local limit", field, err)
		want(name+" Check", field, mk().Check(ctx, limits))
		_, err = mk().Commit(ctx, grant, nil)
		want(name+" Commit", field, err)
		_, err = mk().Release(ctx, grant, "")
		want(name+" Release", field, err)
		_, err = mk().RenewLeases(ctx, grant.Leases)
		want(name+" RenewLeases", field, err)
		_, err = mk().ReleaseLeases(ctx, grant.Leases, "")
		want(name+" ReleaseLeases", field, err)
		_, err = mk().Attach(ctx, id, grant)
		want(name+" Attach", field, err)
		_, err = mk().CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w"})
		want(name+" CreateTask", field, err)
		_, err = mk().ClaimTask(ctx, "w", time.Minute)
		want(name+" ClaimTask", field, err)
		_, err = mk().HeartbeatTask(ctx, id, id, time.Minute)
		want(name+" HeartbeatTask", field, err)
		_, err = mk().AppendEvent(ctx, id, id, ratelimit.Event{Type: "x"})
		want(name+" AppendEvent", field, err)
		_, err = mk().FinishTask(ctx, id, id, ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
		want(name+" FinishTask", field, err)
		_, err = mk().CancelTask(ctx, id, "")
		want(name+" CancelTask", field, err)
		_, err = mk().GetTask(ctx, id)
		want(name+" GetTask", field, err)
		_, err = mk().TaskEvents(ctx, id)
		want(name+" TaskEvents", field, err)
		_, err = mk().TaskAttempts(ctx, id)
		want(name+" TaskAttempts", field, err)
	}
	m := ratelimit.NewMaintenance(nil)
	_, err := m.Recover(ctx)
	want("Recover", "pool", err)
	_, err = m.Prune(ctx, time.Hour)
	want("Prune", "pool", err)
	_, err = m.Doctor(ctx)
	want("Doctor", "pool", err)
	want("CheckPooler", "pool", ratelimit.CheckPooler(ctx, nil))
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("rows written (-before +after):\n%s", diff)
	}
}
