package schema_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// A nil pool (pgxpool.New's result when its error went unchecked) is bad
// input, reported as everywhere in pgadmit: Migrate, Down, Status and
// Version used to panic in pgx's stdlib adapter.
func TestNilPoolIsAValidationError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Migrate": func() error { return schema.Migrate(ctx, nil) },
		"Down":    func() error { return schema.Down(ctx, nil) },
		"Locked":  func() error { return schema.Locked(ctx, nil, func(*goose.Provider) error { return nil }) },
		"Status":  func() error { _, err := schema.Status(ctx, nil); return err },
		"Version": func() error { _, err := schema.Version(ctx, nil); return err },
	} {
		var invalid *ratelimit.ValidationError
		if err := call(); !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "pool" {
			t.Errorf("%s(nil): %v, want a *ratelimit.ValidationError on pool", name, err)
		}
	}
}

// NewProvider of a nil *sql.DB (sql.Open's result when its error went
// unchecked) is bad input too: it was goose's plain "db must not be nil",
// which errors.Is(err, ratelimit.ErrInvalidInput) did not match.
func TestNewProviderOfNilDBIsAValidationError(t *testing.T) {
	t.Parallel()
	p, err := schema.NewProvider(nil)
	var invalid *ratelimit.ValidationError
	if p != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "db" {
		t.Errorf("NewProvider(nil) = %v, %v; want a *ratelimit.ValidationError on db", p, err)
	}
}
