package httpadmit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/errzero"
)

// The zero Problem, and a Refusal without an ExceededError (a custom
// refusal handler's own, or nil), are written, not panicked on: net/http
// panics on WriteHeader(0), and RefusalProblem dereferenced Exceeded.
func TestProblemsOfZeroValues(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	httpadmit.WriteProblem(rec, httpadmit.Problem{})
	var body httpadmit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusInternalServerError || body.Status != rec.Code {
		t.Errorf("WriteProblem(Problem{}): %d %q, %v; want 500 with status 500 in the body", rec.Code, rec.Body, err)
	}
	for name, refusal := range map[string]*httpadmit.Refusal{"nil": nil, "zero": {}} {
		rec := httptest.NewRecorder()
		httpadmit.DefaultRefusalHandler(rec, httptest.NewRequest(http.MethodGet, "/", nil), refusal)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("DefaultRefusalHandler(%s refusal): %d %q", name, rec.Code, rec.Body)
		}
	}
}

// An error made by hand, the zero value of each exported error type or one
// without the error it wraps, says something in Error, without "<nil>" or
// an empty part ("(0 limits fail closed): <nil>" once), and neither Error,
// Unwrap, errors.Is nor errors.As panics on it. Every exported error type
// has its zero value here (errzero.Covers reads them from the source).
func TestZeroErrorsDoNotPanic(t *testing.T) {
	t.Parallel()
	cases := []errzero.Case{
		{Name: "UnavailableError{}", Err: &httpadmit.UnavailableError{}, Is: []error{httpadmit.ErrUnavailable}},
		{Name: "UnavailableError without Err", Err: &httpadmit.UnavailableError{Limits: []httpadmit.Limit{{}}}, Is: []error{httpadmit.ErrUnavailable}},
		{Name: "UnavailableError of two limits, without Err", Err: &httpadmit.UnavailableError{Limits: []httpadmit.Limit{{}, {}}}, Is: []error{httpadmit.ErrUnavailable}},
	}
	errzero.Check(t, cases)
	errzero.Covers(t, ".", cases)
	// One made by hand says what it names, and leaves out what it lacks.
	for i, want := range []string{
		"httpadmit: admission control unavailable",
		"httpadmit: admission control unavailable (1 limit fails closed)",
		"httpadmit: admission control unavailable (2 limits fail closed)",
	} {
		if got := cases[i].Err.Error(); got != want {
			t.Errorf("%s.Error() = %q, want %q", cases[i].Name, got, want)
		}
	}
}
