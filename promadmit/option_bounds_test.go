package promadmit

import (
	"errors"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// What each Option does with the values its doc names: the default New
// applies when it is not given, the values it takes as they are, and the
// ones that make New fail with a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput) naming the option, leaving nothing registered.
// Zero, -0, the smallest and largest floats and ints, NaN and the
// infinities: none panics.
func TestOptionsKeepTheirDocumentedBounds(t *testing.T) {
	t.Parallel()
	// The numbers the README and the docs state: "at least 80% used",
	// "WithMaxSeries (200)".
	if DefaultNearLimit != 0.8 || DefaultMaxSeries != 200 {
		t.Errorf("defaults %v and %d; the docs say 0.8 and 200", DefaultNearLimit, DefaultMaxSeries)
	}
	near := func(m *Metrics) any { return m.nearLimit }
	series := func(m *Metrics) any { return m.maxSeries }
	above1 := math.Nextafter(1, 2)
	var unset Option
	for _, c := range []struct {
		name    string
		opts    []Option
		get     func(*Metrics) any
		want    any    // when New takes the options
		invalid string // else the Field of its *ratelimit.ValidationError
	}{
		// "(default DefaultNearLimit, 80%) ... A threshold outside (0, 1],
		// NaN included, makes New fail with a *ratelimit.ValidationError on
		// "WithNearLimit"."
		{name: "WithNearLimit none", get: near, want: DefaultNearLimit},
		{name: "WithNearLimit(1)", opts: []Option{WithNearLimit(1)}, get: near, want: 1.0},
		{name: "WithNearLimit(0.5)", opts: []Option{WithNearLimit(0.5)}, get: near, want: 0.5},
		{name: "WithNearLimit(SmallestNonzero)", opts: []Option{WithNearLimit(math.SmallestNonzeroFloat64)}, get: near, want: math.SmallestNonzeroFloat64},
		{name: "WithNearLimit(0)", opts: []Option{WithNearLimit(0)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(-0)", opts: []Option{WithNearLimit(math.Copysign(0, -1))}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(-0.5)", opts: []Option{WithNearLimit(-0.5)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(-MaxFloat64)", opts: []Option{WithNearLimit(-math.MaxFloat64)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(1+ulp)", opts: []Option{WithNearLimit(above1)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(80)", opts: []Option{WithNearLimit(80)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(MaxFloat64)", opts: []Option{WithNearLimit(math.MaxFloat64)}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(+Inf)", opts: []Option{WithNearLimit(math.Inf(1))}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(-Inf)", opts: []Option{WithNearLimit(math.Inf(-1))}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(NaN)", opts: []Option{WithNearLimit(math.NaN())}, invalid: "WithNearLimit"},
		// The last one given wins.
		{name: "WithNearLimit(0.5, NaN)", opts: []Option{WithNearLimit(0.5), WithNearLimit(math.NaN())}, invalid: "WithNearLimit"},
		{name: "WithNearLimit(NaN, 0.5)", opts: []Option{WithNearLimit(math.NaN()), WithNearLimit(0.5)}, get: near, want: 0.5},

		// "(default DefaultMaxSeries) ... An n below 1 makes New fail with a
		// *ratelimit.ValidationError on "WithMaxSeries"."
		{name: "WithMaxSeries none", get: series, want: DefaultMaxSeries},
		{name: "WithMaxSeries(1)", opts: []Option{WithMaxSeries(1)}, get: series, want: 1},
		{name: "WithMaxSeries(MaxInt)", opts: []Option{WithMaxSeries(math.MaxInt)}, get: series, want: math.MaxInt},
		{name: "WithMaxSeries(0)", opts: []Option{WithMaxSeries(0)}, invalid: "WithMaxSeries"},
		{name: "WithMaxSeries(-1)", opts: []Option{WithMaxSeries(-1)}, invalid: "WithMaxSeries"},
		{name: "WithMaxSeries(MinInt)", opts: []Option{WithMaxSeries(math.MinInt)}, invalid: "WithMaxSeries"},
		{name: "WithMaxSeries(5, 0)", opts: []Option{WithMaxSeries(5), WithMaxSeries(0)}, invalid: "WithMaxSeries"},

		// "a nil Option sets nothing"
		{name: "nil Options", opts: []Option{unset, WithMaxSeries(3), nil}, get: series, want: 3},
	} {
		reg := prometheus.NewRegistry()
		m, err := New(reg, c.opts...)
		if c.invalid != "" {
			var invalid *ratelimit.ValidationError
			if m != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != c.invalid {
				t.Errorf("%s: New = %v, want a *ratelimit.ValidationError on %s", c.name, err, c.invalid)
			}
			// Refused before anything was registered: New on reg runs.
			if _, err := New(reg); err != nil {
				t.Errorf("%s: New on the registry of the refused New: %v", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: New = %v, want it to take the options", c.name, err)
			continue
		}
		if got := c.get(m); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
