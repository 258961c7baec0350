package httpadmit

import "testing"

// How releaseFor settles a request that ended abnormally once its final
// status went out under WithCommitAfterHeader (answered): committed,
// unless Discard was called, or a middleware inside answered it (its 429,
// which went out through this middleware's writer too) and none served it.
func TestReleaseForAnsweredRequests(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		rep      report
		abnormal string
		answered bool
		want     string
	}{
		{"answered, client left", report{}, ReasonClientDisconnected, true, ""},
		{"answered, panic", report{}, ReasonHandlerPanic, true, ""},
		{"not answered, client left", report{}, ReasonClientDisconnected, false, ReasonClientDisconnected},
		{"answered, Discard", report{discard: "upstream_failed"}, ReasonStreamCut, true, "upstream_failed"},
		{"answered inside, client left", report{answeredInside: ReasonRefusedInside}, ReasonClientDisconnected, true, ReasonClientDisconnected},
		{"answered inside and served inside, client left", report{answeredInside: ReasonRefusedInside, servedInside: true}, ReasonClientDisconnected, true, ""},
		{"answered, ended normally, refused inside", report{answeredInside: ReasonRefusedInside}, "", true, ReasonRefusedInside},
	} {
		if got := releaseFor(c.rep, c.abnormal, c.answered); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
