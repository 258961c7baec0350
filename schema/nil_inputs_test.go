package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// Locked of a nil step is bad input: a *ratelimit.ValidationError on
// "step", before the lock row is taken; it used to take the row, then
// panic calling the step.
func TestLockedOfNilStepIsAValidationError(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewEmptyURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = errors.New("panicked")
			}
		}()
		return schema.Locked(ctx, pool, nil)
	}
	var invalid *ratelimit.ValidationError
	if err := call(); !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "step" {
		t.Fatalf("Locked(nil step) = %v, want a *ratelimit.ValidationError on step", err)
	}
	// The lock row is free, and nothing was applied.
	if v, err := schema.Version(ctx, pool); err != nil || v != 0 {
		t.Fatalf("Version = %d, %v; want 0", v, err)
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate after Locked(nil step): %v", err)
	}
}

// A nil goose option (an option variable left unset) sets nothing, as a
// nil option does everywhere in pgadmit, and a refused option is still
// named by its place among the caller's options, nil ones counted:
// NewProvider and Locked used to panic calling it.
func TestNilProviderOptionSetsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var unset goose.ProviderOption
	call := func(f func() error) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = errors.New("panicked")
			}
		}()
		return f()
	}
	var sources int
	err := call(func() error {
		p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool), unset, goose.WithVerbose(false))
		if err != nil {
			return err
		}
		sources = len(p.ListSources())
		return p.Close()
	})
	if err != nil || sources != migrationCount(t) {
		t.Fatalf("NewProvider with a nil option: %v (%d migrations), want a provider of %d", err, sources, migrationCount(t))
	}
	ran := false
	if err := call(func() error {
		return schema.Locked(ctx, pool, func(*goose.Provider) error { ran = true; return nil }, unset)
	}); err != nil || !ran {
		t.Fatalf("Locked with a nil option = %v (step ran: %v), want its step run", err, ran)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	err = call(func() error {
		p, err := schema.NewProvider(db, unset, goose.WithTableName("t"))
		if err == nil {
			_ = p.Close()
		}
		return err
	})
	var invalid *ratelimit.ValidationError
	if !errors.As(err, &invalid) || invalid.Field != "opts[1]" {
		t.Errorf("NewProvider(nil, WithTableName) = %v, want a *ratelimit.ValidationError on opts[1]", err)
	}
}

// A nil context is bad input: Migrate, Down, Locked, Status and Version
// return a *ratelimit.ValidationError on "ctx" and migrate nothing; they
// used to panic in database/sql.
func TestNilContextIsAValidationError(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewEmptyURL(t))
	var ctx context.Context // unset
	for name, f := range map[string]func() error{
		"Migrate": func() error { return schema.Migrate(ctx, pool) },
		"Down":    func() error { return schema.Down(ctx, pool) },
		"Locked":  func() error { return schema.Locked(ctx, pool, func(*goose.Provider) error { return nil }) },
		"Status":  func() error { _, err := schema.Status(ctx, pool); return err },
		"Version": func() error { _, err := schema.Version(ctx, pool); return err },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = errors.New("panicked")
				}
			}()
			return f()
		}()
		var invalid *ratelimit.ValidationError
		if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "ctx" {
			t.Errorf("%s(nil context) = %v, want a *ratelimit.ValidationError on ctx", name, err)
		}
	}
	if v, err := schema.Version(context.Background(), pool); err != nil || v != 0 {
		t.Errorf("Version = %d, %v; want 0: nothing migrated", v, err)
	}
}
