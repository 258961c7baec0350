package httpadmit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A middleware given a nil http.Handler (a handler variable left unset)
// answers each request through the ErrorHandler with a
// *ratelimit.ValidationError on "next", a 500 by default, logged as a
// configuration error, and reserves nothing: it used to reserve the
// request, then panic calling the nil handler, on every request, limits
// or none.
func TestNilHandlerIsAConfigurationError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("nilnext")
	for name, limits := range map[string]httpadmit.LimitsFunc{
		"limits":    fixed(window("api_key", key, "requests", 10, 1)),
		"no limits": fixed(),
	} {
		var got error
		mw := e.middleware(limits, httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			httpadmit.DefaultErrorHandler(w, r, err)
		}))
		rec := httptest.NewRecorder()
		serve := func() (panicked any) {
			defer func() { panicked = recover() }()
			mw(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			return nil
		}
		if p := serve(); p != nil {
			t.Fatalf("%s: the middleware of a nil handler panicked: %v", name, p)
		}
		var invalid *ratelimit.ValidationError
		if rec.Code != http.StatusInternalServerError || !errors.As(got, &invalid) || invalid.Field != "next" || errors.Is(got, httpadmit.ErrBadRequest) {
			t.Errorf("%s: status %d, error %v; want 500 and a *ratelimit.ValidationError on next", name, rec.Code, got)
		}
	}
	if b := e.books("api_key", key, "requests"); b.Used != 0 || b.Reserved != 0 {
		t.Errorf("books %+v, want nothing reserved", b)
	}
	if !strings.Contains(e.logs.String(), "pgadmit: configuration error, request not decided") {
		t.Errorf("the configuration error is not logged:\n%s", e.logs)
	}
}

// A nil context has no admission: ReportUsage and Discard return
// ErrNoAdmission, GrantFrom no grant. They used to panic in ctx.Value.
func TestNilContextHasNoAdmission(t *testing.T) {
	t.Parallel()
	var ctx context.Context // unset
	if err := httpadmit.ReportUsage(ctx, map[string]float64{"tokens": 1}); !errors.Is(err, httpadmit.ErrNoAdmission) {
		t.Errorf("ReportUsage(nil context) = %v, want ErrNoAdmission", err)
	}
	if err := httpadmit.Discard(ctx, "x"); !errors.Is(err, httpadmit.ErrNoAdmission) {
		t.Errorf("Discard(nil context) = %v, want ErrNoAdmission", err)
	}
	if _, ok := httpadmit.GrantFrom(ctx); ok {
		t.Errorf("GrantFrom(nil context): ok")
	}
}
