package promadmit

import (
	"strings"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/runecut"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The operation, outcome and mode labels take only the values documented
// for them; anything else a caller of the public Observer methods passes
// is Other. A label value is a series kept for the life of the process:
// taking any string would let one caller grow memory and cardinality
// without bound.
var (
	operations = map[string]bool{
		httpadmit.OpReserve: true, httpadmit.OpCommit: true, httpadmit.OpRelease: true,
		httpadmit.OpRenewLeases: true, OpRecover: true, OpPrune: true,
	}
	outcomes = map[httpadmit.Outcome]bool{
		httpadmit.OutcomeAdmitted: true, httpadmit.OutcomeRefused: true, httpadmit.OutcomeShadowRefused: true,
		httpadmit.OutcomeFailedOpen: true, httpadmit.OutcomeFailedClosed: true,
	}
	// results are the values of the result label, every one counted from 0
	// for each operation in pgadmit_db_operations_total.
	results = []string{ResultOK, ResultExceeded, ResultTimeout, ResultError, ResultSkipped,
		ResultLeaseLost, ResultUnknownGrant, ResultRejected, ResultLockWait, ResultCanceled}
)

// operationLabel is op as the operation label: Other unless documented.
func operationLabel(op string) string {
	if operations[op] {
		return op
	}
	return Other
}

// outcomeLabel is o as the outcome label: Other unless documented.
func outcomeLabel(o httpadmit.Outcome) string {
	if outcomes[o] {
		return string(o)
	}
	return Other
}

// modeLabel is mode as the mode label: Other unless Enforce or Shadow
// (Mode.String gives "Mode(7)" for the rest).
func modeLabel(mode httpadmit.Mode) string {
	if mode == httpadmit.Enforce || mode == httpadmit.Shadow {
		return mode.String()
	}
	return Other
}

// labelValue is s as Prometheus takes a label value: valid UTF-8
// (WithLabelValues panics on anything else). The middleware reports only
// limits ratelimit accepted, which are; another caller of the Observer
// methods may pass anything.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// scopeLabel is a scope type or metric as a label value: labelValue, cut
// to ratelimit.MaxScopeBytes (never inside a rune), and never Other, which
// stands for the pairs beyond WithMaxSeries. A real "other" is reported as
// "other_"; so that no two names meet, every name that is "other" and
// underscores gains one more ("other_" is "other__"), after the cut, so a
// label is at most MaxScopeBytes+1 bytes. The middleware reports only
// limits ratelimit accepted, whose names are never longer and keep their
// whole value; the cut bounds what another caller of Decided passes, as
// each value is kept for the life of the process.
func scopeLabel(s string) string {
	s = runecut.Prefix(labelValue(s), ratelimit.MaxScopeBytes)
	if strings.TrimRight(s, "_") == Other {
		return s + "_"
	}
	return s
}
