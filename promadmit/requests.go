package promadmit

import (
	"slices"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// requestOutcomes are the outcome label's values of
// pgadmit_http_requests_total, in precedence order (requestOutcome).
var requestOutcomes = []httpadmit.Outcome{
	httpadmit.OutcomeRefused, httpadmit.OutcomeFailedClosed, httpadmit.OutcomeFailedOpen, httpadmit.OutcomeAdmitted,
}

// requestOutcome is what the decision did with a request, from its limits'
// outcomes: refused when a limit refused it (the middleware lists it after
// the limits that admitted it), else failed_closed or failed_open, else
// admitted, a shadow refusal's request included (it was served). A request
// of no known outcome, which only another caller of Decided passes, is
// Other.
func requestOutcome(outcomes []httpadmit.LimitOutcome) string {
	has := func(o httpadmit.Outcome) bool {
		return slices.ContainsFunc(outcomes, func(l httpadmit.LimitOutcome) bool { return l.Outcome == o })
	}
	for _, o := range requestOutcomes {
		if has(o) {
			return string(o)
		}
	}
	if has(httpadmit.OutcomeShadowRefused) {
		return string(httpadmit.OutcomeAdmitted)
	}
	return Other
}
