package ratelimit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

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
	// Arguments that pass validation: only the context is wrong. The
	// context is not among them, so that it is passed as nil.
	args := validArguments(uniqueKey("nilctx"))
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
	//lint:ignore SA1012 the nil context is the point: CheckPooler must refuse it as bad input
	want("CheckPooler", ratelimit.CheckPooler(nil, pool))

	// The transaction still works: no operation ran in it.
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("rows written (-before +after):\n%s", diff)
	}
}
