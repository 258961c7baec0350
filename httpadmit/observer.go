package httpadmit

import "time"

// Outcome is what one limit of one request came to.
type Outcome string

// Outcomes, as reported to an Observer (and used as metric label values by
// package promadmit).
const (
	// OutcomeAdmitted: the limit admitted the request (enforced or shadow).
	OutcomeAdmitted Outcome = "admitted"
	// OutcomeRefused: this enforced limit refused the request (429).
	OutcomeRefused Outcome = "refused"
	// OutcomeShadowRefused: this shadow limit would have refused the
	// request; it was served anyway.
	OutcomeShadowRefused Outcome = "shadow_refused"
	// OutcomeFailedOpen: the database failed and no enforced limit of the
	// request fails closed: the request was served without a decision, and
	// nothing was recorded. Every limit of the request gets this outcome,
	// but those with a zero Amount, the shadow limits set aside, and a
	// shadow limit found to refuse before the database failed (which keeps
	// OutcomeShadowRefused).
	OutcomeFailedOpen Outcome = "failed_open"
	// OutcomeFailedClosed: the database failed and this enforced limit fails
	// closed: the request was refused (503).
	OutcomeFailedClosed Outcome = "failed_closed"
)

// Database operations, as reported to Observer.DatabaseCall.
const (
	OpReserve     = "reserve"
	OpCommit      = "commit"
	OpRelease     = "release"
	OpRenewLeases = "renew_leases"
)

// LimitOutcome is one limit of a request and what it came to.
type LimitOutcome struct {
	Limit   Limit
	Outcome Outcome
	// Utilization is the share of the limit in use with this request
	// counted (used, reserved or live, plus this request's amount, over the
	// limit), as the decision saw it: above 1 for a refusal. It is the
	// nearest float64 to the exact ratio (0.56 of a limit of 0.7 is 0.8, a
	// near-limit threshold's; float64's was 0.7999999999999999). It is set for
	// OutcomeAdmitted, OutcomeRefused and OutcomeShadowRefused, and 0 for
	// failures (no decision was made) and for a Local limit admitted from
	// this process's block (and a shadow limit on its counter): such a
	// decision does not read the window.
	Utilization float64
}

// Observer is told what the middleware decides and how long the database
// takes; package promadmit implements it with Prometheus metrics. Its
// methods are called on the request's goroutine (DatabaseCall of
// OpRenewLeases, and LeasesHeld for a lease a renewal found lost, on the
// goroutine that renews the request's leases) and
// must be fast and safe for concurrent use. A panic in a method goes on,
// as a handler's does, once the request's grant is settled (see the
// package documentation), but one while another panic unwinds (the
// handler's, settled with the Release) is logged at error level with its
// stack, at most one line a second, and the first panic goes on; one on
// the renewing goroutine, where net/http
// would not recover it and the process would end, is recovered and logged
// at error level with its stack, and the renewals go on.
type Observer interface {
	// Decided reports the limits of one request and what each came to,
	// once per request whose decision reached any, before the handler or
	// the refusal runs (a request none of whose limits it reached is not
	// reported). Limits the decision did not reach are not listed: the other
	// limits of a refused request (a refusal names only the limit that
	// refused), limits with a zero Amount, shadow limits set aside as
	// invalid, and, of a request that failed closed, its shadow limits and
	// its enforced limits that would have failed open.
	Decided(outcomes []LimitOutcome)
	// DatabaseCall reports one call to the database: its operation
	// (OpReserve, OpCommit, OpRelease, OpRenewLeases), how long it took, and
	// its error: nil on success, an *ratelimit.ExceededError for a refusal,
	// and, for a Commit or Release that succeeded but found a reservation
	// of the grant unknown to the database (ratelimit.StatusUnknown:
	// pruned while the request ran), an error matching
	// ratelimit.ErrUnknownGrant, which ratelimit reports in the Settlement
	// only.
	// A request whose limits were all admitted from this process's blocks
	// (Local limits, see ratelimit's documentation) is reserved and settled
	// in memory: it makes no call, and none is reported. Limits ratelimit
	// refuses as invalid never reach the database either.
	DatabaseCall(op string, took time.Duration, err error)
	// LeasesHeld reports the concurrency leases requests in flight hold:
	// +n when a request is admitted with n leases, -n once it is settled;
	// a lease that a renewal found lost (a *ratelimit.LeaseLostError in
	// that DatabaseCall) is taken back then, and not again at the settle.
	LeasesHeld(delta int)
}

// nopObserver is the Observer when none is given.
type nopObserver struct{}

func (nopObserver) Decided([]LimitOutcome)                    {}
func (nopObserver) DatabaseCall(string, time.Duration, error) {}
func (nopObserver) LeasesHeld(int)                            {}
