package oneprefix_test

import (
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/internal/oneprefix"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Errorf writes ratelimit's errors without their prefix, other errors as
// they are, and wraps them all.
func TestErrorf(t *testing.T) {
	sentinel := errors.New("httpadmit: invalid limit")
	invalid := &ratelimit.ValidationError{Field: "Amount", Value: -5.0, Reason: "must not be negative"}
	err := oneprefix.Errorf("%w: %w", sentinel, invalid)
	if got, want := err.Error(), "httpadmit: invalid limit: invalid Amount (-5): must not be negative"; got != want {
		t.Errorf("Errorf = %q, want %q", got, want)
	}
	var v *ratelimit.ValidationError
	if !errors.Is(err, sentinel) || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &v) || v != invalid {
		t.Errorf("Errorf = %v, want it to wrap both", err)
	}
	if got, want := oneprefix.Errorf("schema: %w", errors.New("other")).Error(), "schema: other"; got != want {
		t.Errorf("Errorf = %q, want %q", got, want)
	}
}
