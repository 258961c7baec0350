package httpadmit

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

func limit(scopeType, metric string, quota float64, window time.Duration) Limit {
	return Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: "k-" + scopeType},
		Metric: metric, Limit: quota, Amount: 1, Window: window}}
}

func TestPolicyNames(t *testing.T) {
	t.Parallel()
	named := limit("team", "cost", 5, 0)
	named.Policy = "team budget ✓"
	limits := []Limit{
		limit("api_key", "requests", 600, time.Minute),
		limit("api_key", "tokens", 100_000, time.Minute),
		limit("api_key", "tokens", 1_000_000, 24*time.Hour),
		limit("team", "tokens", 5_000_000, time.Minute),
		limit("model", "concurrent", 50, 0),
		named,
	}
	names := policyNames(limits)
	got := make([]string, len(limits))
	for i, l := range limits {
		got[i] = names[keyOf(l.Limit)]
	}
	want := []string{"requests", "api_key-tokens-60s", "api_key-tokens-86400s", "team-tokens", "concurrent", "team budget _"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// Limits on different counters that would share a name are told apart: by
// metric, then by scope type and window, then by position; every name is
// unique.
func TestPolicyNamesThatCollide(t *testing.T) {
	t.Parallel()
	named := func(l Limit, policy string) Limit {
		l.Policy = policy
		return l
	}
	for name, tc := range map[string]struct {
		limits []Limit
		want   []string
	}{
		"one policy twice": {[]Limit{
			named(limit("api_key", "requests", 10, time.Minute), "gold"),
			named(limit("api_key", "tokens", 1000, time.Minute), "gold"),
		}, []string{"gold-requests", "gold-tokens"}},
		"a policy named as another's metric": {[]Limit{
			named(limit("api_key", "requests", 10, time.Minute), "tokens"),
			limit("api_key", "tokens", 1000, time.Minute),
		}, []string{"tokens-requests", "api_key-tokens-60s"}},
		"equal once printable": {[]Limit{
			named(limit("api_key", "requests", 10, time.Minute), "tier-é"),
			named(limit("api_key", "tokens", 1000, time.Minute), "tier-ü"),
		}, []string{"tier-_-requests", "tier-_-tokens"}},
		"one policy on one metric twice": {[]Limit{
			named(limit("api_key", "tokens", 1000, time.Minute), "gold"),
			named(limit("api_key", "tokens", 100_000, time.Hour), "gold"),
			named(limit("team", "tokens", 10, time.Minute), "gold"),
		}, []string{"gold-api_key-tokens-60s", "gold-api_key-tokens-3600s", "gold-team-tokens-60s"}},
		"derived names that meet": {[]Limit{
			limit("api_key", "tokens", 1000, time.Minute),
			limit("api_key", "tokens", 1000, time.Hour),
			limit("x", "api_key-tokens-60s", 10, time.Minute),
		}, []string{"api_key-tokens-60s-1", "api_key-tokens-3600s", "x-api_key-tokens-60s-60s"}},
		"by position, when nothing else differs": {[]Limit{
			named(limit("api_key", "tokens", 1000, time.Minute), "gold"),
			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "other"}, Metric: "tokens",
				Limit: 10, Amount: 1, Window: time.Minute, Policy: "gold"}},
		}, []string{"gold-api_key-tokens-60s-1", "gold-api_key-tokens-60s-2"}},
	} {
		names := policyNames(tc.limits)
		got := make([]string, len(tc.limits))
		for i, l := range tc.limits {
			got[i] = names[keyOf(l.Limit)]
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: names (-want +got):\n%s", name, diff)
		}
	}
}

// Headers from a grant, serialized exactly; whole quotas only, never
// negative remainders, OpenAI's reset as a Go duration.
func TestHeadersFromAGrant(t *testing.T) {
	t.Parallel()
	decided := time.Date(2026, 11, 30, 12, 0, 43, 500_000_000, time.UTC)
	limits := []Limit{
		limit("api_key", "requests", 600, time.Minute),
		limit("api_key", "tokens", 100_000, time.Minute),
		limit("api_key", "cost", 2.5, time.Hour), // not a whole quota: left out of the IETF headers
		limit("model", "concurrent", 50, 0),
		{Limit: limit("team", "tokens", 10, time.Minute).Limit, Mode: Shadow}, // never shown
	}
	grant := ratelimit.Grant{DecidedAt: decided, Reservations: []ratelimit.Reservation{
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "requests", Window: time.Minute, Limit: 600, Amount: 1, Remaining: 599, ResetAt: decided.Add(16500 * time.Millisecond)},
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", Window: time.Minute, Limit: 100_000, Amount: 500, Remaining: -20.5, ResetAt: decided.Add(16500 * time.Millisecond)},
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "cost", Window: time.Hour, Limit: 2.5, Amount: 1, Remaining: 1.5, ResetAt: decided.Add(6 * time.Minute)},
		{ScopeType: "team", ScopeKey: "k-team", Metric: "tokens", Window: time.Minute, Limit: 10, Amount: 1, Remaining: 3, ResetAt: decided.Add(time.Second)},
	}, Leases: []ratelimit.Lease{{ScopeType: "model", ScopeKey: "k-model", Limit: 50, Amount: 1, Remaining: 49}}}
	h := http.Header{}
	setHeaders(h, allHeaders, grantHeaders(limits, grant))
	want := http.Header{
		"Ratelimit-Policy":                       {`"requests";q=600;w=60, "tokens";q=100000;pgadmit-qu="tokens";w=60, "concurrent";q=50;qu="concurrent-requests"`},
		"Ratelimit":                              {`"requests";r=599;t=17, "tokens";r=0;t=17, "concurrent";r=49`},
		"X-Ratelimit-Limit-Requests":             {"600"},
		"X-Ratelimit-Remaining-Requests":         {"599"},
		"X-Ratelimit-Reset-Requests":             {"16.5s"},
		"X-Ratelimit-Limit-Tokens":               {"100000"},
		"X-Ratelimit-Remaining-Tokens":           {"0"},
		"X-Ratelimit-Reset-Tokens":               {"16.5s"},
		"Anthropic-Ratelimit-Requests-Limit":     {"600"},
		"Anthropic-Ratelimit-Requests-Remaining": {"599"},
		"Anthropic-Ratelimit-Requests-Reset":     {"2026-11-30T12:01:00Z"},
		"Anthropic-Ratelimit-Tokens-Limit":       {"100000"},
		"Anthropic-Ratelimit-Tokens-Remaining":   {"0"},
		"Anthropic-Ratelimit-Tokens-Reset":       {"2026-11-30T12:01:00Z"},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}

	h = http.Header{}
	setHeaders(h, HeadersOpenAI, grantHeaders([]Limit{limit("api_key", "requests", 600, time.Hour)}, ratelimit.Grant{DecidedAt: decided, Reservations: []ratelimit.Reservation{
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "requests", Window: time.Hour, Limit: 600, Remaining: 3, ResetAt: decided.Add(6 * time.Minute)},
	}}))
	if got := h.Get("x-ratelimit-reset-requests"); got != "6m0s" {
		t.Errorf("reset in 6 minutes = %q, want 6m0s", got)
	}
	if h.Get(HeaderRateLimit) != "" {
		t.Errorf("IETF headers sent though not chosen: %v", h)
	}
}

// The binding limit of a metric is the one with the least left.
func TestOpenAIHeadersShowTheBindingLimit(t *testing.T) {
	t.Parallel()
	decided := time.Unix(1_800_000_000, 0)
	limits := []Limit{limit("api_key", "tokens", 1000, time.Minute), limit("team", "tokens", 5000, time.Minute)}
	grant := ratelimit.Grant{DecidedAt: decided, Reservations: []ratelimit.Reservation{
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", Window: time.Minute, Limit: 1000, Remaining: 900, ResetAt: decided.Add(time.Second)},
		{ScopeType: "team", ScopeKey: "k-team", Metric: "tokens", Window: time.Minute, Limit: 5000, Remaining: 40, ResetAt: decided.Add(2 * time.Second)},
	}}
	h := http.Header{}
	setHeaders(h, HeadersOpenAI, grantHeaders(limits, grant))
	if got := [3]string{h.Get("x-ratelimit-limit-tokens"), h.Get("x-ratelimit-remaining-tokens"), h.Get("x-ratelimit-reset-tokens")}; got != [3]string{"5000", "40", "2s"} {
		t.Errorf("tokens headers %v, want the team's", got)
	}
}

// A quota of ratelimit.MaxAmount (16 digits) is left out of the IETF
// headers, as one that is not a whole number is: q is a Structured Field
// Integer, 15 digits at most. The largest quota that fits is shown.
func TestIETFHeadersLeaveOutAQuotaNoIntegerHolds(t *testing.T) {
	t.Parallel()
	decided := time.Unix(1_800_000_000, 0)
	limits := []Limit{limit("api_key", "tokens", ratelimit.MaxAmount, time.Minute), limit("team", "tokens", ratelimit.MaxAmount-1, time.Minute)}
	grant := ratelimit.Grant{DecidedAt: decided, Reservations: []ratelimit.Reservation{
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", Window: time.Minute, Limit: ratelimit.MaxAmount, Remaining: 10, ResetAt: decided.Add(time.Second)},
		{ScopeType: "team", ScopeKey: "k-team", Metric: "tokens", Window: time.Minute, Limit: ratelimit.MaxAmount - 1, Remaining: 20, ResetAt: decided.Add(time.Second)},
	}}
	h := http.Header{}
	setHeaders(h, HeadersIETF, grantHeaders(limits, grant))
	want := http.Header{
		"Ratelimit-Policy": {`"team-tokens";q=999999999999999;pgadmit-qu="tokens";w=60`},
		"Ratelimit":        {`"team-tokens";r=20;t=1`},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

// A reset is rounded up to the millisecond, as the IETF header's t is to the second: a quota
// that resets in 0.3 ms does not read as resetting now ("0s").
func TestFormatResetRoundsUpToTheMillisecond(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{300 * time.Microsecond, "1ms"},
		{time.Nanosecond, "1ms"},
		{time.Millisecond, "1ms"},
		{1500 * time.Microsecond, "2ms"},
		{17342 * time.Millisecond, "17.342s"},
		{6 * time.Minute, "6m0s"},
		{0, "0s"},
		{-time.Second, "0s"},
	} {
		if got := formatReset(tc.in); got != tc.want {
			t.Errorf("formatReset(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A refusal's remaining headers round down what the limit had left exactly:
// a tokens limit of 2.3 with 0.3 used has 2 left, which float64's 2.3 - 0.3
// (1.9999999999999998) rounded down to 1.
func TestRefusalHeadersRoundDownWhatIsExactlyLeft(t *testing.T) {
	t.Parallel()
	l := limit("api_key", "tokens", 2.3, time.Minute)
	h := http.Header{}
	setHeaders(h, HeadersOpenAI|HeadersAnthropic, refusalHeaders([]Limit{l}, &Refusal{Limit: l, Policy: "tokens", Exceeded: &ratelimit.ExceededError{
		ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", WindowSeconds: 60,
		Limit: 2.3, Current: 0.3, Amount: 3, RetryAfter: time.Second, Retryable: true,
	}}))
	if got := [2]string{h.Get("x-ratelimit-remaining-tokens"), h.Get("anthropic-ratelimit-tokens-remaining")}; got != [2]string{"2", "2"} {
		t.Errorf("remaining headers %q, want 2 and 2", got)
	}
}

// A refusal's remaining headers round down the exact difference, not its
// nearest float64: a limit of 1e8 with 1e-9 used has 99999999.999999999
// left, which a float64 holds as 1e8, the whole quota.
func TestRefusalHeadersRoundDownBeforeFloat64Rounds(t *testing.T) {
	t.Parallel()
	l := limit("api_key", "tokens", 1e8, time.Minute)
	h := http.Header{}
	setHeaders(h, allHeaders, refusalHeaders([]Limit{l}, &Refusal{Limit: l, Policy: "tokens", Exceeded: &ratelimit.ExceededError{
		ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", WindowSeconds: 60,
		Limit: 1e8, Current: 1e-9, Amount: 1e8, RetryAfter: time.Second, Retryable: true,
	}}))
	if got := [3]string{h.Get("x-ratelimit-remaining-tokens"), h.Get("anthropic-ratelimit-tokens-remaining"), h.Get(HeaderRateLimit)}; got != [3]string{"99999999", "99999999", `"tokens";r=99999999;t=1`} {
		t.Errorf("remaining headers %q, want 99999999 in each", got)
	}
}
