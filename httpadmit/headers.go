package httpadmit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/pgadmit/pgadmit/internal/decimal"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// HeaderFamily is a set of rate-limit header families, combined with |.
type HeaderFamily uint8

const (
	// HeadersIETF sends RateLimit-Policy and RateLimit as defined by
	// draft-ietf-httpapi-ratelimit-headers-10, serialized as Structured
	// Fields (RFC 9651).
	HeadersIETF HeaderFamily = 1 << iota
	// HeadersOpenAI sends x-ratelimit-limit-requests,
	// x-ratelimit-remaining-requests, x-ratelimit-reset-requests (a Go
	// duration such as 1s or 6m0s) and the same three for tokens.
	HeadersOpenAI
	// HeadersAnthropic sends anthropic-ratelimit-requests-limit, -remaining
	// and -reset (an RFC 3339 time), and the same three for tokens.
	HeadersAnthropic

	// DefaultHeaders is what the middleware sends unless told otherwise.
	DefaultHeaders = HeadersIETF | HeadersOpenAI

	allHeaders = HeadersIETF | HeadersOpenAI | HeadersAnthropic
)

// The header fields the middleware sets.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
)

// VendorQuotaUnitParam is the RateLimit-Policy parameter that names the
// unit of a quota whose unit the draft's registry lacks: a policy on
// tokens reads "tokens";q=100000;pgadmit-qu="tokens";w=60. The draft
// allows such vendor-prefixed parameters; its own qu parameter only takes
// registered units (requests, the default, content-bytes and
// concurrent-requests), so it is sent only for concurrent limits.
const VendorQuotaUnitParam = "pgadmit-qu"

// maxSFInteger is the largest Integer a Structured Field can carry.
const maxSFInteger = 999_999_999_999_999

// limitState is what a decision said about one limit.
type limitState struct {
	quota, amount float64
	// remaining is the capacity left with this request counted, exactly,
	// for the headers to round down (as a float64, 2.3 - 0.3 is
	// 1.9999999999999998, shown as 1).
	remaining decimal.Units
	window    time.Duration // zero for concurrent limits
	resetIn   time.Duration // on the database's clock; zero when unknown
	resetAt   time.Time
}

// grantStates is the state of every limit in a grant, by key.
func grantStates(g ratelimit.Grant) map[key]limitState {
	out := make(map[key]limitState, len(g.Reservations)+len(g.Leases))
	for _, r := range g.Reservations {
		if r.Local {
			// Remaining is what this process's block had left, not the
			// window: telling it would send clients (and the near-limit
			// metric) a number that has nothing to do with the quota.
			continue
		}
		k := key{scopeType: r.ScopeType, scopeKey: r.ScopeKey, metric: r.Metric, window: r.Window}
		out[k] = limitState{quota: r.Limit, amount: r.Amount, remaining: decimal.Of(r.Remaining), window: r.Window,
			resetIn: max(r.ResetAt.Sub(g.DecidedAt), 0), resetAt: r.ResetAt}
	}
	for _, l := range g.Leases {
		k := key{scopeType: l.ScopeType, scopeKey: l.ScopeKey, metric: ratelimit.MetricConcurrent}
		out[k] = limitState{quota: l.Limit, amount: l.Amount, remaining: decimal.Of(l.Remaining)}
	}
	return out
}

// policy is one enforced limit as the headers show it: its name, and its
// state when the decision told it.
type policy struct {
	name  string
	limit Limit
	state *limitState
}

// grantHeaders are the policies of an admitted request.
func grantHeaders(limits []Limit, g ratelimit.Grant) []policy {
	states := grantStates(g)
	enforced := enforcedOf(limits)
	names := policyNames(enforced)
	out := make([]policy, 0, len(enforced))
	for _, l := range enforced {
		p := policy{name: names[keyOf(l.Limit)], limit: l}
		if st, ok := states[keyOf(l.Limit)]; ok {
			p.state = &st
			if l.Amount == 0 {
				// Reserve skipped it: the reservation on its counter is a
				// shadow limit's, whose quota is not this one's.
				p.state = outerState(&st, l)
			}
		}
		out = append(out, p)
	}
	return out
}

// refusalHeaders are the policies of a refused request: all of them, with
// the state of the one that refused (the only one the refusal tells).
func refusalHeaders(limits []Limit, r *Refusal) []policy {
	enforced := enforcedOf(limits)
	names := policyNames(enforced)
	e := r.Exceeded
	out := make([]policy, 0, len(enforced))
	for _, l := range enforced {
		p := policy{name: names[keyOf(l.Limit)], limit: l}
		if keyOf(l.Limit) == keyOfExceeded(e) {
			st := limitState{quota: e.Limit, amount: e.Amount, remaining: exceededRemaining(e),
				window: time.Duration(e.WindowSeconds) * time.Second, resetAt: e.ResetAt}
			if st.window > 0 && e.Retryable {
				st.resetIn = e.RetryAfter // ResetAt minus the database's now, at least 1s
			}
			p.state = &st
		}
		out = append(out, p)
	}
	return out
}

// exceededRemaining is what e's limit had left, exactly (RemainingText):
// Remaining, the nearest float64, holds 1e8 less 1e-9 as 1e8, which the
// headers would show as the whole quota left.
func exceededRemaining(e *ratelimit.ExceededError) decimal.Units {
	if left, ok := decimal.Parse(e.RemainingText()); ok {
		return left
	}
	return decimal.Of(e.Remaining()) // NaN or an infinity, in an error built by hand: 0
}

// shownHeaders is what a request's rate-limit headers show: the families
// sent and the limits in them, of a middleware and of those around it.
type shownHeaders struct {
	families HeaderFamily
	policies []policy
}

// withOuter is what the headers show of a request decided by several
// middlewares (one for every route, another for a route's own limits):
// the policies of those around this one (outer, as they showed them), then
// this one's (own), all named anew so that no name is shared. Each
// middleware sets the headers over those of the ones around it, which
// would otherwise be lost. A counter that both limit is shown as this one
// decided it: the later decision. When this decision did not read it (a
// zero Amount, a Local limit admitted from this process's block, a limit
// other than the one a refusal names) but the outer one did, it is shown
// with the outer one's state against this one's quota (outerState): shown
// without state, the OpenAI and Anthropic headers could show another limit
// on its metric, with more left than the counter allows. outer is not
// changed.
func withOuter(outer, own []policy) []policy {
	if len(outer) == 0 {
		return own
	}
	mine := make(map[key]bool, len(own))
	for _, p := range own {
		mine[keyOf(p.limit.Limit)] = true
	}
	all := make([]policy, 0, len(outer)+len(own))
	told := make(map[key]*limitState, len(outer)) // the counters the outer ones read
	for _, p := range outer {
		if !mine[keyOf(p.limit.Limit)] {
			all = append(all, p)
		} else if p.state != nil {
			told[keyOf(p.limit.Limit)] = p.state
		}
	}
	for _, p := range own {
		if st, ok := told[keyOf(p.limit.Limit)]; ok && p.state == nil {
			p.state = outerState(st, p.limit)
		}
		all = append(all, p)
	}
	limits := make([]Limit, len(all))
	for i, p := range all {
		limits[i] = p.limit
	}
	names := policyNames(limits)
	for i := range all {
		all[i].name = names[keyOf(all[i].limit.Limit)]
	}
	return all
}

// outerState is the state of l's counter as another limit's decision told
// it (st: an outer middleware's, or a shadow limit's reserved on the counter
// of l, an enforced limit with a zero Amount), against l's quota: what the
// counter held then (st's quota less its remaining, that request counted)
// is the same for both limits, subtracted exactly (in float64, a quota of
// 2.3 on a counter that a quota of 0.5 had 0.2 of left had
// 1.9999999999999998 left). Its window and reset are the counter's.
func outerState(st *limitState, l Limit) *limitState {
	out := *st
	out.quota, out.amount = l.Limit.Limit, l.Amount
	held := decimal.Of(st.quota).Minus(st.remaining)
	out.remaining = decimal.Of(l.Limit.Limit).Minus(held)
	return &out
}

// nameOf is the name policies give l.
func nameOf(policies []policy, l Limit) string {
	for _, p := range policies {
		if keyOf(p.limit.Limit) == keyOf(l.Limit) {
			return p.name
		}
	}
	return ""
}

// policyNames names each limit for the headers: its Policy when set, else
// its metric; metrics that several limits share are qualified by scope
// type, then by window ("api_key-tokens-60s"). Names are what a
// Structured Field String may hold: printable ASCII. Limits on different
// counters that would still share a name (one Policy on two limits, as a
// plan's name on its requests and tokens limits; a Policy equal to another
// limit's metric; names equal once made printable) are told apart: each of
// them is qualified by its metric ("gold-requests"), then by scope type
// and window, and as a last resort by its position in limits.
func policyNames(limits []Limit) map[key]string {
	count := func(f func(Limit) string) map[string]int {
		n := map[string]int{}
		for _, l := range limits {
			n[f(l)]++
		}
		return n
	}
	byMetric := count(func(l Limit) string { return l.Metric })
	byScope := count(func(l Limit) string { return l.Scope.Type + "-" + l.Metric })
	// Each counter's candidate names, from the plainest to the most
	// qualified; the last one is unique.
	var keys []key
	candidates := map[key][]string{}
	for i, l := range limits {
		k := keyOf(l.Limit)
		if _, seen := candidates[k]; seen {
			continue // the same counter twice is Reserve's to refuse
		}
		keys = append(keys, k)
		full := fmt.Sprintf("%s-%s-%ds", l.Scope.Type, l.Metric, int64(k.window/time.Second))
		var c []string
		switch {
		case l.Policy != "":
			c = []string{l.Policy, l.Policy + "-" + l.Metric, l.Policy + "-" + full}
		case byMetric[l.Metric] == 1:
			c = []string{l.Metric, full}
		case byScope[l.Scope.Type+"-"+l.Metric] == 1:
			c = []string{l.Scope.Type + "-" + l.Metric, full}
		default:
			c = []string{full}
		}
		c = append(c, fmt.Sprintf("%s-%d", c[len(c)-1], i+1))
		for j := range c {
			c[j] = printable(c[j])
		}
		candidates[k] = c
	}
	// Qualify every counter of a shared name one step further, until no
	// name is shared.
	level := make(map[key]int, len(keys))
	names := make(map[key]string, len(keys))
	for {
		holders := map[string][]key{}
		for _, k := range keys {
			names[k] = candidates[k][level[k]]
			holders[names[k]] = append(holders[names[k]], k)
		}
		shared := false
		for _, ks := range holders {
			for _, k := range ks {
				if len(ks) > 1 && level[k] < len(candidates[k])-1 {
					level[k]++
					shared = true
				}
			}
		}
		if !shared {
			return names
		}
	}
}

// setHeaders sets the chosen header families for policies on h. It
// replaces only the headers it has a value for; behind another middleware,
// clearHeaders first deletes what that one set.
func setHeaders(h http.Header, families HeaderFamily, policies []policy) {
	if families&HeadersIETF != 0 {
		setIETF(h, policies)
	}
	if families&HeadersOpenAI != 0 {
		for _, metric := range []string{ratelimit.MetricRequests, ratelimit.MetricTokens} {
			if p, ok := binding(policies, metric); ok {
				h.Set("x-ratelimit-limit-"+metric, formatInt(p.state.quota))
				h.Set("x-ratelimit-remaining-"+metric, formatInt(p.state.remaining.Floor()))
				if p.state.resetIn > 0 { // unknown for a refusal that retrying cannot cure: not "0s"
					h.Set("x-ratelimit-reset-"+metric, formatReset(p.state.resetIn))
				}
			}
		}
	}
	if families&HeadersAnthropic != 0 {
		for _, metric := range []string{ratelimit.MetricRequests, ratelimit.MetricTokens} {
			if p, ok := binding(policies, metric); ok {
				h.Set("anthropic-ratelimit-"+metric+"-limit", formatInt(p.state.quota))
				h.Set("anthropic-ratelimit-"+metric+"-remaining", formatInt(p.state.remaining.Floor()))
				if p.state.resetIn > 0 { // as for OpenAI: a window's end is no time to retry a request it never takes
					h.Set("anthropic-ratelimit-"+metric+"-reset", p.state.resetAt.UTC().Format(time.RFC3339))
				}
			}
		}
	}
}

// clearHeaders deletes the chosen header families from h, for a
// middleware behind another one that set them: its policies include that
// one's limits (withOuter), and what h kept of the other decision that
// setHeaders has no value for (a RateLimit item of a limit now shown
// without state, the x-ratelimit-* of a metric now bound by no limit with
// a state) would speak of it alone. A single middleware deletes nothing:
// headers set around it are not its own.
func clearHeaders(h http.Header, families HeaderFamily) {
	for _, name := range headerFields(families) {
		h.Del(name)
	}
}

// headerFields are the names of the fields of families, canonical (as
// keys of an http.Header).
func headerFields(families HeaderFamily) []string {
	var names []string
	if families&HeadersIETF != 0 {
		names = append(names, HeaderRateLimitPolicy, HeaderRateLimit)
	}
	for _, metric := range []string{ratelimit.MetricRequests, ratelimit.MetricTokens} {
		if families&HeadersOpenAI != 0 {
			names = append(names, "x-ratelimit-limit-"+metric, "x-ratelimit-remaining-"+metric, "x-ratelimit-reset-"+metric)
		}
		if families&HeadersAnthropic != 0 {
			names = append(names, "anthropic-ratelimit-"+metric+"-limit", "anthropic-ratelimit-"+metric+"-remaining",
				"anthropic-ratelimit-"+metric+"-reset")
		}
	}
	for i, name := range names {
		names[i] = http.CanonicalHeaderKey(name)
	}
	return names
}

// heldFields are those of names (canonical) that h holds a value for: of
// the fields of the middleware's families, those it set before the handler
// runs (or a middleware around it did). The others are the handler's.
func heldFields(h http.Header, names []string) []string {
	var held []string
	for _, name := range names {
		if len(h[name]) > 0 {
			held = append(held, name)
		}
	}
	return held
}

// firstValues keeps the first value of each field of names (canonical,
// heldFields) that h holds several of: the one the middleware set, before the handler
// added others (a httputil.ReverseProxy adds the upstream's headers to the
// writer's, and LLM providers answer with rate-limit headers of their
// own, about the gateway's account with them). A field sent twice is read
// as both values joined ("99000, 1999000"), by Python's and JavaScript's
// header maps, or as a list of policies: the client would see the
// provider's numbers as its own. A field the handler set (Set, which
// replaces the middleware's value) or that the middleware has no value for
// is left as the handler made it.
func firstValues(h http.Header, names []string) {
	for _, name := range names {
		if v := h[name]; len(v) > 1 {
			h[name] = v[:1:1]
		}
	}
}

// setIETF sets RateLimit-Policy (every enforced limit with a whole quota
// that a Structured Field Integer holds: below ratelimit.MaxAmount)
// and RateLimit (those of them the decision told the state of).
func setIETF(h http.Header, policies []policy) {
	var pol, cur httpsfv.List
	for _, p := range policies {
		q := p.limit.Limit.Limit
		if q != math.Trunc(q) || q > maxSFInteger {
			continue // a Structured Field quota is a whole number
		}
		item := httpsfv.NewItem(p.name)
		item.Params.Add("q", int64(q))
		switch {
		case p.limit.Metric == ratelimit.MetricConcurrent:
			item.Params.Add("qu", "concurrent-requests")
		case p.limit.Metric != ratelimit.MetricRequests:
			item.Params.Add(VendorQuotaUnitParam, printable(p.limit.Metric))
		}
		if k := keyOf(p.limit.Limit); k.window > 0 {
			item.Params.Add("w", int64(k.window/time.Second))
		}
		pol = append(pol, item)
		if p.state == nil {
			continue
		}
		st := httpsfv.NewItem(p.name)
		st.Params.Add("r", int64(min(max(p.state.remaining.Floor(), 0), maxSFInteger)))
		if p.state.window > 0 && p.state.resetIn > 0 { // t=0 would say the quota resets now
			st.Params.Add("t", ceilSeconds(p.state.resetIn))
		}
		cur = append(cur, st)
	}
	if len(pol) > 0 {
		if v, err := httpsfv.Marshal(pol); err == nil {
			h.Set(HeaderRateLimitPolicy, v)
		}
	}
	if len(cur) > 0 {
		if v, err := httpsfv.Marshal(cur); err == nil {
			h.Set(HeaderRateLimit, v)
		}
	}
}

// binding is the window limit on metric with the least capacity left: the
// one a client runs into first.
func binding(policies []policy, metric string) (policy, bool) {
	var best policy
	found := false
	for _, p := range policies {
		if p.limit.Metric != metric || p.state == nil || p.state.window == 0 {
			continue
		}
		if !found || p.state.remaining.Cmp(best.state.remaining) < 0 {
			best, found = p, true
		}
	}
	return best, found
}

// formatInt is a whole number of quota units, rounded down, never negative.
func formatInt(v float64) string {
	return strconv.FormatFloat(math.Floor(max(v, 0)), 'f', 0, 64)
}

// formatReset is a duration as OpenAI writes it: 1s, 6m0s, 17.342s, 20ms. It is rounded up
// to the millisecond, as the IETF t is to the second: a reset 0.3 ms away is not "0s" (now).
func formatReset(d time.Duration) string {
	d = max(d, 0)
	if rounded := d.Truncate(time.Millisecond); rounded < d {
		d = rounded + time.Millisecond
	}
	return d.String()
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(max(d, 0).Seconds()))
}

// printable replaces what a Structured Field String cannot hold (anything
// outside printable ASCII) with '_'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}
