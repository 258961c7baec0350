package httpadmit_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// New's errors name the package once: they read "httpadmit: New:
// ratelimit: invalid ...", the *ratelimit.ValidationError's own prefix
// after New's. errors.As still finds the *ratelimit.ValidationError, and
// errors.Is matches ratelimit.ErrInvalidInput. The error each request of a
// middleware given a nil http.Handler gets reads alike.
func TestNewErrorsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	limiter := ratelimit.New(nil) // taken: New reads nothing
	limits := func(*http.Request) ([]httpadmit.Limit, error) { return nil, nil }
	for _, c := range []struct {
		name    string
		new     func() error
		field   string
		message string
	}{
		{"nil limiter", func() error { _, err := httpadmit.New(nil, limits); return err },
			"limiter", "httpadmit: New: invalid limiter (<nil>): must not be nil"},
		{"zero limiter", func() error { _, err := httpadmit.New(&ratelimit.Limiter{}, limits); return err },
			"limiter", "httpadmit: New: invalid limiter (Limiter{}): not made with ratelimit.New"},
		{"nil limits", func() error { _, err := httpadmit.New(limiter, nil); return err },
			"limits", "httpadmit: New: invalid limits (<nil>): must not be nil"},
		{"WithDecisionTimeout(0)", func() error { _, err := httpadmit.New(limiter, limits, httpadmit.WithDecisionTimeout(0)); return err },
			"WithDecisionTimeout", "httpadmit: New: invalid WithDecisionTimeout (0s): must be positive"},
		{"WithHeaders(0x08)", func() error { _, err := httpadmit.New(limiter, limits, httpadmit.WithHeaders(0x08)); return err },
			"WithHeaders", "httpadmit: New: invalid WithHeaders (0x8): unknown header families 0x8"},
		{"nil handler", func() error {
			var got error
			mw, err := httpadmit.New(limiter, limits, httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
				httpadmit.WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, err error) { got = err }))
			if err != nil {
				return err
			}
			mw(nil).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			return got
		}, "next", "httpadmit: invalid next (<nil>): the middleware was given a nil http.Handler"},
	} {
		err := c.new()
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
