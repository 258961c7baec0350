package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// The demo's gateway reads at most 1 MiB of a body: one over it is the
// *http.MaxBytesError that httpadmit's default error handler answers with
// a 413, not a body cut at 1 MiB that then fails to parse (a 400 saying
// the JSON is wrong).
func TestDemoGatewayRefusesABodyOverItsBoundAsTooLarge(t *testing.T) {
	t.Parallel()
	limits := gatewayLimits("p/", map[string]httpPlan{"k": httpPlanPro})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(strings.Repeat(" ", 1<<20+1)))
	r.Header.Set("Authorization", "Bearer k")
	_, err := limits(r)
	if tooLarge := (*http.MaxBytesError)(nil); !errors.As(err, &tooLarge) || tooLarge.Limit != 1<<20 {
		t.Errorf("a body of 1 MiB + 1: error %v, want an *http.MaxBytesError of 1 MiB", err)
	}
	if !errors.Is(err, httpadmit.ErrBadRequest) {
		t.Errorf("a body of 1 MiB + 1: error %v, want it marked ErrBadRequest", err)
	}
}
