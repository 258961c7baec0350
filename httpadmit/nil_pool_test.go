package httpadmit_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A Limiter made from a nil pool refuses every operation as bad input (a
// *ratelimit.ValidationError on "conn"): the middleware must not pass that
// on as the client's fault (400), nor panic, but answer 500, as for a
// limit no request can be decided on, and not run the handler. (A zero
// Limiter, not made with ratelimit.New, which used to make Reserve panic,
// is refused by New: TestNewRefusesBadConfiguration.) The error is logged,
// at most once a second, as every configuration error.
func TestUnusableLimiterIsAServerError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, c := range []struct {
		name    string
		limiter *ratelimit.Limiter
		field   string
	}{
		{"nil pool", ratelimit.New((*pgxpool.Pool)(nil)), "conn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got error
			mw, err := httpadmit.New(c.limiter, fixed(window("api_key", uniqueKey("unusable"), "requests", 10, 1)),
				httpadmit.WithObserver(e.obs), httpadmit.WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))), httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
					got = err
					httpadmit.DefaultErrorHandler(w, r, err)
				}))
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			rec := httptest.NewRecorder()
			serve := func() (panicked any) {
				defer func() { panicked = recover() }()
				mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				return nil
			}
			if p := serve(); p != nil {
				t.Fatalf("the middleware panicked: %v", p)
			}
			if rec.Code != http.StatusInternalServerError || ran {
				t.Errorf("status %d (handler ran: %v), want 500 and the handler not run", rec.Code, ran)
			}
			var invalid *ratelimit.ValidationError
			if errors.Is(got, httpadmit.ErrBadRequest) || !errors.As(got, &invalid) || invalid.Field != c.field {
				t.Errorf("error handler got %v, want the Limiter's *ratelimit.ValidationError on %s, not ErrBadRequest", got, c.field)
			}
			if !strings.Contains(e.logs.String(), "pgadmit: configuration error, request not decided") {
				t.Errorf("the configuration error is not logged:\n%s", e.logs)
			}
		})
	}
}
