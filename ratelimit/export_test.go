package ratelimit

import "time"

// Test-only hooks. Statements that take an optional now (NULL: the
// database's now()) get one from these clocks instead, so tests drive time
// instead of sleeping until a lease or a window ends. Production code has
// no way to set them: every time there comes from the database.

// WithClock makes the Limiter's task, lease and check statements read now
// from now(). Reserve, Commit and Release still use the database's clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock = now }
}

// WithMaintenanceClock makes Recover, Prune and Doctor, and their leases,
// read now from now().
func WithMaintenanceClock(now func() time.Time) MaintenanceOption {
	return func(o *maintenanceOptions) { o.clock = now }
}
