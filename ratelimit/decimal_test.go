package ratelimit

import "testing"

// remaining subtracts exactly: ten tenths of a limit of 1 leave 0, where
// float64 leaves -2.7755575615628914e-17.
func TestRemainingIsExact(t *testing.T) {
	t.Parallel()
	if got := remaining(1, 0.9, 0, 0.1); got != 0 {
		t.Errorf("remaining(1, 0.9, 0, 0.1) = %v, want 0", got)
	}
	if got := remaining(0.3, 0.1, 0.1, 0); got != 0.1 {
		t.Errorf("remaining(0.3, 0.1, 0.1, 0) = %v, want 0.1", got)
	}
}
