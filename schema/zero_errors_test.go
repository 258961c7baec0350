package schema_test

import (
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/errzero"
	"github.com/pgadmit/pgadmit/schema"
)

// An error made by hand, the zero value of each exported error type or one
// without the error it wraps, says something in Error, without "<nil>" or
// an empty part, and neither Error, Unwrap, errors.Is nor errors.As panics
// on it: a CompletedError whose last migration result was nil, or had no
// Source, panicked in Error, and one without Err said "then: <nil>".
// Every exported error type has its zero value here (errzero.Covers reads
// them from the source).
func TestZeroErrorsDoNotPanic(t *testing.T) {
	t.Parallel()
	cases := []errzero.Case{
		{Name: "CompletedError{}", Err: &schema.CompletedError{}},
		{Name: "CompletedError of a nil result", Err: &schema.CompletedError{Applied: []*goose.MigrationResult{nil}}},
		{Name: "CompletedError of a result without Source", Err: &schema.CompletedError{Applied: []*goose.MigrationResult{{Direction: "down"}}}},
	}
	errzero.Check(t, cases)
	errzero.Covers(t, ".", cases)
	// One made by hand says what it names, and leaves out what it lacks.
	for _, c := range []struct {
		err  error
		want string
	}{
		{&schema.CompletedError{}, "applied every pending migration, then failed"},
		{cases[1].Err, "applied every pending migration (1), then failed"},
		{cases[2].Err, "reverted every applied migration (1), then failed"},
		{&schema.CompletedError{Applied: []*goose.MigrationResult{{Source: &goose.Source{}}}}, "applied every pending migration (1), then failed"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}
