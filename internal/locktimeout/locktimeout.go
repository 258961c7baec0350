// Package locktimeout turns a bound on a wait for a lock into PostgreSQL's lock_timeout, an int
// of milliseconds, one way for ratelimit (WithMaintenanceLockTimeout, WithDoctorLockTimeout) and
// pgadmit's --lock-timeout alike.
package locktimeout

import (
	"math"
	"time"
)

// Max is lock_timeout's largest value, INT_MAX milliseconds (596h31m23.647s).
const Max = math.MaxInt32 * time.Millisecond

// Millis returns d as lock_timeout is set to it (db's SetMaintenanceSettings): rounded up to a whole
// millisecond, its unit, so that a positive bound never becomes 0 (none); past Max, Max; 0 for
// a d that is not positive. It counts whole milliseconds: a thousand times d in float seconds
// is not always whole (1.132s would be 1133ms).
func Millis(d time.Duration) int64 {
	switch {
	case d <= 0:
		return 0
	case d >= Max:
		return int64(Max / time.Millisecond)
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Applied returns the bound lock_timeout is set to for d (Millis) as a Duration: what the server
// gives up after, which errors name (ratelimit's LockWaitError.Bound, pgadmit's messages).
func Applied(d time.Duration) time.Duration { return time.Duration(Millis(d)) * time.Millisecond }
