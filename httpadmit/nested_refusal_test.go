package httpadmit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Behind two middlewares, a request the inner one answers itself (its
// default handlers: a 429 refusal, a 400 for limits it cannot read) never
// reaches the upstream, so the outer one releases its reservation instead
// of committing its estimate. A custom refusal handler decides: one that
// serves a fallback leaves the outer admission to be committed, one that
// calls Discard releases it.
func TestNestedInnerAnswerReleasesTheOuterAdmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key := uniqueKey("org"), uniqueKey("key")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	full := fixed(window("api_key", key, ratelimit.MetricTokens, 0, 1000)) // refuses every request
	unreadable := func(*http.Request) ([]httpadmit.Limit, error) {
		return nil, fmt.Errorf("no api key: %w", httpadmit.ErrBadRequest)
	}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the upstream handler ran for a request the inner middleware answered")
	})
	serve := func(inner func(http.Handler) http.Handler, wantCode int) {
		t.Helper()
		rec := httptest.NewRecorder()
		outer(inner(upstream)).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != wantCode {
			t.Fatalf("status %d %s; want %d", rec.Code, rec.Body, wantCode)
		}
	}
	used := func() float64 { t.Helper(); return e.books("org", org, ratelimit.MetricTokens).Used }

	serve(e.middleware(full), http.StatusTooManyRequests)
	serve(e.middleware(unreadable), http.StatusBadRequest)
	if got := used(); got != 0 {
		t.Fatalf("org tokens used after the inner middleware refused and failed = %g, want 0 (released)", got)
	}

	fallback := httpadmit.WithRefusalHandler(func(w http.ResponseWriter, r *http.Request, _ *httpadmit.Refusal) {
		w.WriteHeader(http.StatusOK) // served from a cache, say: the outer admission stands
	})
	serve(e.middleware(full, fallback), http.StatusOK)
	if got := used(); got != 1000 {
		t.Fatalf("org tokens used after a fallback = %g, want 1000 (committed at the estimate)", got)
	}

	discarding := httpadmit.WithRefusalHandler(func(w http.ResponseWriter, r *http.Request, refusal *httpadmit.Refusal) {
		if err := httpadmit.Discard(r.Context(), "refused_by_key"); err != nil {
			t.Errorf("Discard in a refusal handler: %v", err)
		}
		w.WriteHeader(http.StatusTooManyRequests)
	})
	serve(e.middleware(full, discarding), http.StatusTooManyRequests)
	if got := used(); got != 1000 {
		t.Fatalf("org tokens used after a handler that discards = %g, want still 1000", got)
	}
	e.nothingHeld()

	// Alone, a middleware's default handlers find nothing to discard.
	rec := httptest.NewRecorder()
	e.middleware(full)(upstream).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("alone: status %d; want 429", rec.Code)
	}
	if err := httpadmit.Discard(httptest.NewRequest(http.MethodGet, "/", nil).Context(), "x"); !errors.Is(err, httpadmit.ErrNoAdmission) {
		t.Fatalf("Discard without a middleware: %v; want ErrNoAdmission", err)
	}
}
