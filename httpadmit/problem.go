package httpadmit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// ProblemTypeQuotaExceeded is the problem type of a refusal
// (draft-ietf-httpapi-ratelimit-headers-10, section 5.1).
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is an RFC 9457 problem details object, as the default handlers
// write it (Content-Type application/problem+json). The members after
// Instance are extensions, present in refusals only.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`

	// ViolatedPolicies names the limit that refused the request, as in the
	// RateLimit-Policy header.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// ScopeType and Metric say which limit; never the scope key, which may
	// be an internal account name.
	ScopeType string `json:"scope-type,omitempty"`
	Metric    string `json:"metric,omitempty"`
	// Quota is the limit; WindowSeconds its window (absent for concurrent
	// limits); Remaining what it had left (ExceededError.Remaining: 0.1 of
	// a cost limit of 0.3 with 0.2 used; only the headers, whose remaining
	// values are integers, round it down); Requested what the request
	// needed.
	Quota         *float64 `json:"quota,omitempty"`
	WindowSeconds int      `json:"window-seconds,omitempty"`
	Remaining     *float64 `json:"remaining,omitempty"`
	Requested     *float64 `json:"requested,omitempty"`
	// Retryable is false when the request can never fit (it needs more
	// than the whole quota); RetryAfterSeconds is then absent.
	Retryable         *bool `json:"retryable,omitempty"`
	RetryAfterSeconds int64 `json:"retry-after-seconds,omitempty"`
}

// WriteProblem writes p as the response, with p.Status as its status; a
// Status that is no HTTP status code (outside 100 to 999, as the zero
// Problem's), no final one (1xx), or one whose response has no content
// (204, 205, 304), and so cannot carry the problem, is written as 500, in
// the body too.
func WriteProblem(w http.ResponseWriter, p Problem) {
	// net/http panics on a code outside 100 to 999, and sends a 1xx ahead
	// of the response, whose body would then go out as a 200 OK (a 101
	// switches protocols, and the body goes nowhere). It drops the body of
	// a 204 or 304, over HTTP/2 not its Content-Length, so the client's
	// read fails; RFC 9110 forbids content in a 205, which net/http sends.
	switch p.Status {
	case http.StatusNoContent, http.StatusResetContent, http.StatusNotModified:
		p.Status = http.StatusInternalServerError
	}
	if p.Status < 200 || p.Status > 999 {
		p.Status = http.StatusInternalServerError
	}
	body, err := json.Marshal(p)
	if err != nil { // only non-finite numbers, which the handlers never set
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// RefusalProblem is the problem body of a refusal: 429, quota-exceeded,
// the policy that refused and its numbers (zero for a Refusal without
// them, as a nil one or a Refusal{}).
func RefusalProblem(refusal *Refusal) Problem {
	if refusal == nil {
		refusal = &Refusal{}
	}
	e := refusal.Exceeded
	if e == nil {
		e = &ratelimit.ExceededError{}
	}
	remaining := e.Remaining()
	quota, requested, retryable := e.Limit, e.Amount, e.Retryable
	p := Problem{
		Type:             ProblemTypeQuotaExceeded,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		ViolatedPolicies: []string{refusal.Policy},
		ScopeType:        e.ScopeType, Metric: e.Metric,
		Quota: &quota, WindowSeconds: e.WindowSeconds, Remaining: &remaining, Requested: &requested,
		Retryable: &retryable,
	}
	window := "in this window of " + durationtext.Operator(time.Duration(e.WindowSeconds)*time.Second)
	if e.Metric == ratelimit.MetricConcurrent {
		window = "in flight"
	}
	if !e.Retryable {
		p.Detail = fmt.Sprintf("%s: the request needs %s, more than the whole quota of %s; retrying cannot help",
			refusal.Policy, amounttext.Full(e.Amount), amounttext.Full(e.Limit))
		return p
	}
	p.RetryAfterSeconds = ceilSeconds(e.RetryAfter)
	p.Detail = fmt.Sprintf("%s: the request needs %s, %s of %s left %s; retry after %ds",
		refusal.Policy, amounttext.Full(e.Amount), e.RemainingText(), amounttext.Full(e.Limit), window, p.RetryAfterSeconds)
	return p
}

// DefaultRefusalHandler answers 429 with RefusalProblem's body. The
// request never reaches the upstream, so middlewares around this one that
// admitted it release their reservations (ReasonRefusedInside) instead of
// committing their estimates, unless their handler reports usage or
// another middleware inside them admits and commits the request (it was
// served another way).
func DefaultRefusalHandler(w http.ResponseWriter, r *http.Request, refusal *Refusal) {
	answeredInside(r, ReasonRefusedInside)
	WriteProblem(w, RefusalProblem(refusal))
}

// StatusClientClosedRequest (499, nginx's) is the status DefaultErrorHandler
// gives a request whose client left before it was admitted (ErrRequestEnded
// with context.Canceled): no client reads it, but access logs and metrics
// tell it from a server's error.
const StatusClientClosedRequest = 499

// DefaultErrorHandler answers 413 for an error holding an
// *http.MaxBytesError (a LimitsFunc that read the body through
// http.MaxBytesReader met a body over its bound; marked ErrBadRequest or
// not), 400 for ErrBadRequest (with its message; for a
// limit that ratelimit refused, the field and the reason, never the value,
// which may be a scope key), 503 with Retry-After: 1 for ErrUnavailable,
// for ErrRequestEnded 503 when the request's deadline passed and
// StatusClientClosedRequest when its client left, and 500 otherwise,
// ErrInvalidLimit included (without the error's text, which may hold
// internals). Like DefaultRefusalHandler, it releases the request's
// admissions by middlewares around this one (ReasonUndecidedInside).
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	answeredInside(r, ReasonUndecidedInside)
	tooLarge := (*http.MaxBytesError)(nil)
	switch {
	case errors.As(err, &tooLarge):
		WriteProblem(w, Problem{Type: "about:blank", Title: http.StatusText(http.StatusRequestEntityTooLarge),
			Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the request body is larger than the %d bytes it may hold", tooLarge.Limit)})
	case errors.Is(err, ErrBadRequest):
		detail := err.Error()
		if invalid := (*ratelimit.ValidationError)(nil); errors.As(err, &invalid) {
			detail = fmt.Sprintf("invalid %s: %s", invalid.Field, invalid.Reason)
		}
		WriteProblem(w, Problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail})
	case errors.Is(err, ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		WriteProblem(w, Problem{Type: "about:blank", Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: "admission control is unavailable; retry shortly"})
	case errors.Is(err, ErrRequestEnded) && errors.Is(err, context.DeadlineExceeded):
		WriteProblem(w, Problem{Type: "about:blank", Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the request's deadline passed before it was admitted"})
	case errors.Is(err, ErrRequestEnded):
		WriteProblem(w, Problem{Type: "about:blank", Title: "Client Closed Request", Status: StatusClientClosedRequest,
			Detail: "the client left before the request was admitted"})
	default:
		WriteProblem(w, Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError})
	}
}
