package ratelimit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A nil context (a caller's ctx variable left unset) is bad input: every
// operation of a Limiter (combined, not, in a transaction) and of a
// Maintenance, and CheckPooler, return a *ValidationError on "ctx" and
// write nothing. They used to panic with a nil pointer dereference, deep
// in the combiner or in pgx.
func TestNilContextIsAValidationError(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	const id = "123e4567-e89b-12d3-a456-426614174000"
	key := uniqueKey("nilctx")
	local := window("model", key, ratelimit.MetricTokens, 1000, 1)
	local.Local = true
	leases := []ratelimit.Lease{{ID: id}}
	// Arguments that pass validation: only the context is wrong. The
	// context is not in the map, so that it is passed as nil.
	args := map[reflect.Type]any{
		reflect.TypeFor[string]():        id, // a task, attempt or worker id, a reason
		reflect.TypeFor[time.Duration](): time.Minute,
		reflect.TypeFor[[]ratelimit.Limit](): []ratelimit.Limit{
			window("api_key", key, "requests", 10, 1), concurrent("model", key, 2), local,
		},
		reflect.TypeFor[ratelimit.Grant](): ratelimit.Grant{
			Reservations: []ratelimit.Reservation{{ID: id, Amount: 1}}, Leases: leases,
		},
		reflect.TypeFor[[]ratelimit.Lease]():  leases,
		reflect.TypeFor[ratelimit.TaskSpec](): ratelimit.TaskSpec{Kind: "test", Worker: "w"},
		reflect.TypeFor[ratelimit.Event]():    ratelimit.Event{Type: "x"},
		reflect.TypeFor[ratelimit.Outcome]():  ratelimit.Outcome{Status: ratelimit.TaskSucceeded},
	}
	want := func(method string, err error) {
		t.Helper()
		var invalid *ratelimit.ValidationError
		if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "ctx" {
			t.Errorf("%s(nil context): err = %v, want a *ValidationError on ctx", method, err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	combined, alone := ratelimit.New(pool), ratelimit.New(pool, ratelimit.WithoutCombining())
	defer combined.Close()
	defer alone.Close()
	args[reflect.TypeFor[pgx.Tx]()] = tx
	for name, l := range map[string]*ratelimit.Limiter{
		"Limiter": combined, "Limiter without combining": alone, "Limiter.WithTx(tx)": combined.WithTx(tx),
	} {
		callEveryMethod(t, name, reflect.ValueOf(l), args, want)
	}
	callEveryMethod(t, "Maintenance", reflect.ValueOf(ratelimit.NewMaintenance(pool)), args, want)
	want("CheckPooler", ratelimit.CheckPooler(nil, pool)) // the nil context is the point

	// The transaction still works: no operation ran in it.
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("rows written (-before +after):\n%s", diff)
	}
}
