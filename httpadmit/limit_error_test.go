package httpadmit_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The errors a request gets for the limits its LimitsFunc returned name
// the package once: "httpadmit: invalid limit: invalid Limits[1].Mode
// ...", not "httpadmit: invalid limit: ratelimit: invalid ...", and the
// request's own fault alike ("httpadmit: bad request: invalid ...").
// errors.As still finds the *ratelimit.ValidationError, and errors.Is
// matches the sentinel and ratelimit.ErrInvalidInput. Every one is refused
// before Reserve: the limiter reads no database.
func TestLimitErrorsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	limiter := ratelimit.New(nil) // taken: nothing reaches Reserve
	limit := func(metric string) httpadmit.Limit {
		return httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "k"},
			Metric: metric, Limit: 10, Amount: 1, Window: time.Minute}}
	}
	var tooMany []httpadmit.Limit
	for i := range ratelimit.MaxLimitsPerCall + 1 {
		l := limit(ratelimit.MetricRequests)
		l.Scope.Key = fmt.Sprint(i)
		tooMany = append(tooMany, l)
	}
	for _, c := range []struct {
		name     string
		second   func(*httpadmit.Limit) // of two limits; nil: tooMany
		sentinel error
		field    string
		message  string
	}{
		{"unknown mode", func(l *httpadmit.Limit) { l.Mode = 7 }, httpadmit.ErrInvalidLimit, "Limits[1].Mode",
			"httpadmit: invalid limit: invalid Limits[1].Mode (Mode(7)): unknown mode: want Enforce or Shadow"},
		{"negative quota", func(l *httpadmit.Limit) { l.Limit.Limit = -5 }, httpadmit.ErrInvalidLimit, "Limits[1].Limit",
			"httpadmit: invalid limit: invalid Limits[1].Limit (-5): must not be negative"},
		{"negative estimate", func(l *httpadmit.Limit) { l.Amount = -5 }, httpadmit.ErrBadRequest, "Limits[1].Amount",
			"httpadmit: bad request: invalid Limits[1].Amount (-5): must not be negative"},
		{"one counter twice", func(l *httpadmit.Limit) { l.Metric = ratelimit.MetricRequests }, httpadmit.ErrBadRequest, "Limits[1]",
			"httpadmit: bad request: invalid Limits[1] (api_key:k requests/1m0s): same scope, metric and window as Limits[0]"},
		{"too many limits", nil, httpadmit.ErrInvalidLimit, "Limits",
			fmt.Sprintf("httpadmit: invalid limit: invalid Limits (%d): %[1]d enforced limits with an amount, where Reserve takes at most %d",
				ratelimit.MaxLimitsPerCall+1, ratelimit.MaxLimitsPerCall)},
	} {
		limits := tooMany
		if c.second != nil {
			second := limit(ratelimit.MetricTokens)
			c.second(&second)
			limits = []httpadmit.Limit{limit(ratelimit.MetricRequests), second}
		}
		var err error
		mw, nerr := httpadmit.New(limiter, func(*http.Request) ([]httpadmit.Limit, error) { return limits, nil },
			httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			httpadmit.WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, e error) { err = e }))
		if nerr != nil {
			t.Fatal(nerr)
		}
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Errorf("%s: the handler ran", c.name) })).
			ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != c.field || !errors.Is(err, c.sentinel) || !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Errorf("%s: %v, want %v with a *ratelimit.ValidationError on %s", c.name, err, c.sentinel, c.field)
			continue
		}
		if got := err.Error(); got != c.message {
			t.Errorf("%s: %q, want %q", c.name, got, c.message)
		}
	}
}
