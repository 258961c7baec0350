package promadmit_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The package's errors about its input name the package once:
// "promadmit: New: invalid reg ...", not "promadmit: New: ratelimit:
// invalid reg ...". errors.As still finds the *ratelimit.ValidationError,
// and errors.Is matches ratelimit.ErrInvalidInput.
func TestInputErrorsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		call    func() error
		field   string
		message string
	}{
		{"New(nil reg)", func() error { _, err := promadmit.New(nil); return err },
			"reg", "promadmit: New: invalid reg (<nil>): must not be nil"},
		{"WithNearLimit(NaN)", func() error {
			_, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithNearLimit(math.NaN()))
			return err
		},
			"WithNearLimit", "promadmit: New: invalid WithNearLimit (NaN): must be in (0, 1]"},
		{"WithMaxSeries(0)", func() error {
			_, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithMaxSeries(0))
			return err
		},
			"WithMaxSeries", "promadmit: New: invalid WithMaxSeries (0): must be at least 1"},
		{"NewCombiningCollector(nil)", func() error { _, err := promadmit.NewCombiningCollector(nil); return err },
			"limiter", "promadmit: NewCombiningCollector: invalid limiter (<nil>): must not be nil"},
		{"NewPoolCollector(zero pool)", func() error { _, err := promadmit.NewPoolCollector(&pgxpool.Pool{}); return err },
			"pool", "promadmit: NewPoolCollector: invalid pool (pgxpool.Pool{}): must be made by pgxpool.New or pgxpool.NewWithConfig"},
		{"Metrics{}.Prune", func() error { _, err := (&promadmit.Metrics{}).Prune(ctx, nil, time.Hour); return err },
			"Metrics", "promadmit: Prune: invalid Metrics (Metrics{}): not made with New"},
	} {
		err := c.call()
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != c.field || !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Errorf("%s: %v, want a *ratelimit.ValidationError on %s", c.name, err, c.field)
			continue
		}
		if got := err.Error(); got != c.message {
			t.Errorf("%s: %q, want %q", c.name, got, c.message)
		}
	}
}
