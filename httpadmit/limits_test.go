package httpadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// badLimits serves one request with limits and returns the error the error
// handler got (nil when there was none), having checked that the handler
// did not run and that nothing was reserved on the scopes of limits.
func badLimits(t *testing.T, e *env, limits []httpadmit.Limit) (code int, err error) {
	t.Helper()
	var got error
	ran := false
	onError := func(w http.ResponseWriter, r *http.Request, err error) {
		got = err
		httpadmit.DefaultErrorHandler(w, r, err)
	}
	h := e.middleware(fixed(limits...), httpadmit.WithErrorHandler(onError))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if got != nil && ran {
		t.Errorf("the handler ran for limits refused with %v", got)
	}
	if got != nil {
		for _, l := range limits {
			if b := e.books(l.Scope.Type, l.Scope.Key, l.Metric); b != (book{}) {
				t.Errorf("limits refused with %v, yet %s:%s %s holds %+v", got, l.Scope.Type, l.Scope.Key, l.Metric, b)
			}
			if l.Metric == ratelimit.MetricConcurrent && e.liveLeases(l.Scope.Type, l.Scope.Key) != 0 {
				t.Errorf("limits refused with %v, yet a lease was taken", got)
			}
		}
	}
	return rec.Code, got
}

// wantInvalid fails unless err is the *ratelimit.ValidationError for field
// that sentinel matches.
func wantInvalid(t *testing.T, name string, err, sentinel error, field string) {
	t.Helper()
	var invalid *ratelimit.ValidationError
	if !errors.Is(err, sentinel) || !errors.As(err, &invalid) || invalid.Field != field {
		t.Errorf("%s: error %v, want %v on %s", name, err, sentinel, field)
	}
}

// A Mode or FailurePolicy that is none of the defined values is refused
// before anything is reserved: the request gets the error handler with an
// error matching ErrInvalidLimit (a 500 by default: the configuration is
// wrong, not the request). An unknown Mode used to be skipped (the limit
// was never applied, the request served) and an unknown FailurePolicy
// failed open.
func TestUnknownModeOrFailurePolicyIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, tc := range map[string]struct {
		bad   func(httpadmit.Limit) httpadmit.Limit
		field string
	}{
		"mode":           {func(l httpadmit.Limit) httpadmit.Limit { l.Mode = 7; return l }, "Limits[1].Mode"},
		"failure policy": {func(l httpadmit.Limit) httpadmit.Limit { l.OnFailure = 9; return l }, "Limits[1].OnFailure"},
	} {
		key := uniqueKey("k")
		limits := []httpadmit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 10, 1),
			tc.bad(window("api_key", key, ratelimit.MetricTokens, 1000, 10)),
			concurrent("model", key, 4),
		}
		code, err := badLimits(t, e, limits)
		if code != http.StatusInternalServerError {
			t.Errorf("%s: status %d, want 500", name, code)
		}
		wantInvalid(t, name, err, httpadmit.ErrInvalidLimit, tc.field)
		if errors.Is(err, httpadmit.ErrBadRequest) {
			t.Errorf("%s: %v is the request's fault (ErrBadRequest)", name, err)
		}
	}
	if s := httpadmit.Mode(7).String(); s == httpadmit.Enforce.String() || s == httpadmit.Shadow.String() {
		t.Errorf("Mode(7).String() = %q, a defined mode's name", s)
	}
	if got := e.obs.callCounts(); len(got) != 0 {
		t.Errorf("database calls for refused limits: %v", got)
	}
	if got := strings.Count(e.logs.String(), "pgadmit: configuration error, request not decided"); got != 2 {
		t.Errorf("%d lines about the invalid limits of two middlewares, want 2:\n%s", got, e.logs)
	}
}

// Two enforced limits of one Policy (a plan's name on its requests and
// tokens limits) are served, and the headers tell them apart by metric.
// They used to be sent as two policies of one name, which a client cannot
// tell apart.
func TestPolicyNamesThatCollideAreToldApart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("k")
	requests := window("api_key", key, ratelimit.MetricRequests, 10, 1)
	requests.Policy = "gold"
	tokens := window("api_key", key, ratelimit.MetricTokens, 1000, 10)
	tokens.Policy = "gold"
	h := e.middleware(fixed(requests, tokens))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", rec.Code)
	}
	var names []string
	for _, item := range parseList(t, rec.Header(), httpadmit.HeaderRateLimitPolicy) {
		names = append(names, item.Name)
	}
	if diff := cmp.Diff([]string{"gold-requests", "gold-tokens"}, names); diff != "" {
		t.Errorf("RateLimit-Policy names (-want +got):\n%s", diff)
	}
}

// A limit that ratelimit refuses is named in the 400 by its index in what
// the LimitsFunc returned. It used to be named by its index among the
// limits sent to Reserve (enforced ones with an amount, then shadow ones),
// which is not where the caller wrote it.
func TestBadLimitIsNamedByTheCallersIndex(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("k")
	for name, tc := range map[string]struct {
		limits []httpadmit.Limit
		field  string
		reason string
	}{
		"after a shadow and a zero amount": {[]httpadmit.Limit{
			shadow(window("team", key, ratelimit.MetricRequests, 10, 1)),
			window("api_key", key, ratelimit.MetricRequests, 10, 0),
			window("api_key", key, ratelimit.MetricTokens, 1000, nan()),
		}, "Limits[2].Amount", ""},
		"a counter twice": {[]httpadmit.Limit{
			shadow(window("team", key, ratelimit.MetricRequests, 10, 1)),
			window("api_key", key, ratelimit.MetricTokens, 1000, 10),
			window("api_key", key, ratelimit.MetricRequests, 10, 0),
			window("api_key", key, ratelimit.MetricTokens, 2000, 10),
		}, "Limits[3]", "Limits[1]"},
	} {
		code, err := badLimits(t, e, tc.limits)
		if code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, code)
		}
		wantInvalid(t, name, err, httpadmit.ErrBadRequest, tc.field)
		var invalid *ratelimit.ValidationError
		if errors.As(err, &invalid) && !strings.Contains(invalid.Reason, tc.reason) {
			t.Errorf("%s: reason %q, want it to name %s", name, invalid.Reason, tc.reason)
		}
		rec := httptest.NewRecorder()
		httpadmit.DefaultErrorHandler(rec, httptest.NewRequest(http.MethodPost, "/", nil), err)
		var p httpadmit.Problem
		if json.Unmarshal(rec.Body.Bytes(), &p) != nil || !strings.HasPrefix(p.Detail, "invalid "+tc.field+":") {
			t.Errorf("%s: 400 detail %q, want it to name %s", name, p.Detail, tc.field)
		}
	}
}

// More enforced limits with an amount than one Reserve takes
// (ratelimit.MaxLimitsPerCall) come from the LimitsFunc, not from the
// client: the request gets an error matching ErrInvalidLimit (a 500 by
// default) naming "Limits", nothing is reserved, and the error is logged
// at most once a second, as a shadow limit set aside is. It was a 400
// ("invalid Limits: at most 64 limits per call"), blaming the client for
// the deployment's configuration, and logged nowhere.
func TestMoreEnforcedLimitsThanReserveTakesIsAServerError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("k")
	var limits []httpadmit.Limit
	for i := range ratelimit.MaxLimitsPerCall + 1 {
		limits = append(limits, window("api_key", fmt.Sprintf("%s-%d", key, i), ratelimit.MetricRequests, 10, 1))
	}
	var got error
	h := e.middleware(fixed(limits...), httpadmit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		got = err
		httpadmit.DefaultErrorHandler(w, r, err)
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("the handler ran") }))
	for range 2 { // one middleware: its log lines are throttled together
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusInternalServerError {
			t.Errorf("status %d, want 500", rec.Code)
		}
		wantInvalid(t, "too many limits", got, httpadmit.ErrInvalidLimit, "Limits")
		if errors.Is(got, httpadmit.ErrBadRequest) {
			t.Errorf("%v is the request's fault (ErrBadRequest)", got)
		}
	}
	if b := e.books("api_key", key+"-0", ratelimit.MetricRequests); b != (book{}) {
		t.Errorf("the first limit's counter holds %+v, want nothing", b)
	}
	if got := strings.Count(e.logs.String(), "pgadmit: configuration error, request not decided"); got != 1 {
		t.Errorf("%d lines about the invalid limits for two requests, want 1 (one a second):\n%s", got, e.logs)
	}
	if got := e.obs.callCounts(); len(got) != 0 {
		t.Errorf("database calls for refused limits: %v", got)
	}
}

// A limit that ratelimit refuses is blamed on the request (ErrBadRequest,
// a 400) only in what a LimitsFunc takes from the request: the estimate
// (Amount, from max_tokens say), the scope key (an API key from a header),
// or two limits on one counter, which keys from the request can make
// coincide. The quota, the metric, the scope type, the window, the lease
// TTL and Local are the configuration's, whatever the request: an error
// matching ErrInvalidLimit (a 500 by default, logged). They were all 400s,
// the client blamed for the deployment's configuration.
func TestInvalidLimitIsBlamedOnWhatSetIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	bad := func(f func(*httpadmit.Limit)) []httpadmit.Limit {
		key := uniqueKey("k")
		l := window("api_key", key, ratelimit.MetricTokens, 1000, 10)
		f(&l)
		return []httpadmit.Limit{window("api_key", key, ratelimit.MetricRequests, 10, 1), l}
	}
	for name, tc := range map[string]struct {
		limits   []httpadmit.Limit
		sentinel error
		field    string
	}{
		"negative quota":             {bad(func(l *httpadmit.Limit) { l.Limit.Limit = -5 }), httpadmit.ErrInvalidLimit, "Limits[1].Limit"},
		"negative quota, no amount":  {bad(func(l *httpadmit.Limit) { l.Limit.Limit, l.Amount = -5, 0 }), httpadmit.ErrInvalidLimit, "Limits[1].Limit"},
		"no metric":                  {bad(func(l *httpadmit.Limit) { l.Metric = "" }), httpadmit.ErrInvalidLimit, "Limits[1].Metric"},
		"no scope type":              {bad(func(l *httpadmit.Limit) { l.Scope.Type = " " }), httpadmit.ErrInvalidLimit, "Limits[1].Scope.Type"},
		"window of 1.5s":             {bad(func(l *httpadmit.Limit) { l.Window = 1500 * time.Millisecond }), httpadmit.ErrInvalidLimit, "Limits[1].Window"},
		"lease TTL of two days":      {bad(func(l *httpadmit.Limit) { l.LeaseTTL = 48 * time.Hour }), httpadmit.ErrInvalidLimit, "Limits[1].LeaseTTL"},
		"queue_size metric":          {bad(func(l *httpadmit.Limit) { l.Metric = ratelimit.MetricQueueSize }), httpadmit.ErrInvalidLimit, "Limits[1].Metric"},
		"a Local concurrent limit":   {bad(func(l *httpadmit.Limit) { l.Metric, l.Local = ratelimit.MetricConcurrent, true }), httpadmit.ErrInvalidLimit, "Limits[1].Local"},
		"negative estimate":          {bad(func(l *httpadmit.Limit) { l.Amount = -5 }), httpadmit.ErrBadRequest, "Limits[1].Amount"},
		"estimate past MaxAmount":    {bad(func(l *httpadmit.Limit) { l.Amount = 2 * ratelimit.MaxAmount }), httpadmit.ErrBadRequest, "Limits[1].Amount"},
		"no scope key":               {bad(func(l *httpadmit.Limit) { l.Scope.Key = "" }), httpadmit.ErrBadRequest, "Limits[1].Scope.Key"},
		"a scope key past 512 bytes": {bad(func(l *httpadmit.Limit) { l.Scope.Key = strings.Repeat("k", 600) }), httpadmit.ErrBadRequest, "Limits[1].Scope.Key"},
		"one counter twice":          {bad(func(l *httpadmit.Limit) { l.Metric = ratelimit.MetricRequests }), httpadmit.ErrBadRequest, "Limits[1]"},
	} {
		code, err := badLimits(t, e, tc.limits)
		want := http.StatusBadRequest
		if tc.sentinel == httpadmit.ErrInvalidLimit {
			want = http.StatusInternalServerError
		}
		if code != want {
			t.Errorf("%s: status %d, want %d", name, code, want)
		}
		wantInvalid(t, name, err, tc.sentinel, tc.field)
		if errors.Is(err, httpadmit.ErrBadRequest) && errors.Is(err, httpadmit.ErrInvalidLimit) {
			t.Errorf("%s: %v is both the request's fault and the configuration's", name, err)
		}
	}
}
