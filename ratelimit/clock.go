package ratelimit

import "time"

// clock is where the statements that take an optional now (a NULL now is
// the database's now()) read it. nil, in production, sends NULL: every time
// pgadmit stores or compares comes from the database's clock. Tests set one
// (export_test.go) to drive time instead of sleeping.
type clock func() time.Time

// at returns the time to send as a statement's now, or nil for the
// database's own.
func (c clock) at() *time.Time {
	if c == nil {
		return nil
	}
	t := c()
	return &t
}
