package errzero

import "testing"

// A message with a hole an unset field left is flawed; a whole one is not.
func TestMessageFlaw(t *testing.T) {
	t.Parallel()
	for msg, flawed := range map[string]bool{
		"ratelimit: prune: allotments: step failed":       false,
		"ratelimit: invalid pool (<nil>): must be a pool": true,
		"": true,
		"applied every pending migration (0), then: <nil>":   true,
		"ratelimit: stale execution token for task  (x): y":  true,
		"ratelimit: stale execution token for task t (x): ":  true,
		"ratelimit: stale execution token for task t (x):":   true,
		"ratelimit: cancel task t: not queued (status )":     true,
		"lost: 0 lease(s) expired or released (); renewed 0": true,
		"ratelimit: : step failed":                           true,
		" leading space":                                     true,
	} {
		if got := MessageFlaw(msg); (got != "") != flawed {
			t.Errorf("MessageFlaw(%q) = %q, want flawed %v", msg, got, flawed)
		}
	}
}
