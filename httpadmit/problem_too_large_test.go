package httpadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// A LimitsFunc that reads the body through http.MaxBytesReader gets an
// *http.MaxBytesError for a body over its bound: the default error handler
// answers 413 naming the bound, marked ErrBadRequest or not, not the 400
// of a body it could not parse (or the 500 of an error not marked).
func TestDefaultErrorHandlerAnswers413ForABodyOverItsBound(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"marked":     fmt.Errorf("%w: reading the body: %w", httpadmit.ErrBadRequest, &http.MaxBytesError{Limit: 1 << 20}),
		"not marked": fmt.Errorf("reading the body: %w", &http.MaxBytesError{Limit: 1 << 20}),
	} {
		rec := httptest.NewRecorder()
		httpadmit.DefaultErrorHandler(rec, httptest.NewRequest(http.MethodPost, "/", nil), err)
		var p httpadmit.Problem
		if decodeErr := json.Unmarshal(rec.Body.Bytes(), &p); decodeErr != nil {
			t.Fatalf("%s: body %q: %v", name, rec.Body, decodeErr)
		}
		if rec.Code != http.StatusRequestEntityTooLarge || p.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: status %d (problem %d), want 413", name, rec.Code, p.Status)
		}
		if want := "the request body is larger than the 1048576 bytes it may hold"; p.Detail != want {
			t.Errorf("%s: detail %q, want %q", name, p.Detail, want)
		}
	}
	// A body that broke off is still the request's 400.
	rec := httptest.NewRecorder()
	httpadmit.DefaultErrorHandler(rec, httptest.NewRequest(http.MethodPost, "/", nil),
		fmt.Errorf("%w: reading the body: %w", httpadmit.ErrBadRequest, errors.New("unexpected EOF")))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("a broken-off body: status %d, want 400", rec.Code)
	}
}
