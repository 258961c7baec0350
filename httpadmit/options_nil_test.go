package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// A nil Option sets nothing: New used to panic calling it.
func TestNewTakesNilOptions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("nilopt")
	var unset httpadmit.Option
	// Through e.middleware, whose decision timeout suits a loaded machine:
	// with the default 250 ms, CI's first decision on a new pool timed out.
	mw := e.middleware(fixed(window("api_key", key, "requests", 10, 1)), unset, httpadmit.WithHeaders(httpadmit.DefaultHeaders), nil)
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d, want 204", rec.Code)
	}
	if b := e.books("api_key", key, "requests"); b.Used != 1 || b.Reserved != 0 {
		t.Fatalf("books %+v, want used 1", b)
	}
}
