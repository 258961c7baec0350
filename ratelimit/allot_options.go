package ratelimit

import (
	"time"

	"github.com/pgadmit/pgadmit/internal/runecut"
)

// AllotmentOptions size and time the blocks that Local limits are admitted
// from. Zero fields take their defaults, and so do a negative Horizon,
// IdleAfter or Margin and a negative or NaN MaxShare; a MaxShare above 1
// is 1.
type AllotmentOptions struct {
	// Holder names this process in gateway_rate_limit_allotments; the
	// default is host/pid/random, as a maintenance run's lease holder is
	// (the host cut to 200 bytes, the random part 12 hex digits). Text
	// PostgreSQL cannot hold (NUL bytes,
	// invalid UTF-8) is dropped or replaced by U+FFFD, and the holder is at
	// most MaxScopeBytes bytes, as a scope is: a longer one is cut to them,
	// never inside a character.
	Holder string
	// MaxShare caps a block at this fraction of its limit (default
	// DefaultAllotmentMaxShare, 1/16), so that no process sits on more than
	// its share while others wait. One above 1 is 1: a block of up to the
	// whole limit, though still at most half of what the window has free
	// unless the request waiting for it needs more, so one process's two
	// blocks may hold three quarters of it. A request whose amount is above
	// the cap is decided in the database.
	MaxShare float64
	// Horizon sizes a block to what this process admitted on its counter in
	// this much time, at the rate it is admitting (default
	// DefaultAllotmentHorizon, 1s). The rate is measured over 50 ms at least;
	// what was admitted in less counts as 50 ms' worth, so a burst's blocks
	// grow from one to the next.
	Horizon time.Duration
	// IdleAfter returns a block nothing was admitted from for this long
	// (default DefaultAllotmentIdleAfter, 2s), so that another process can
	// use its units.
	IdleAfter time.Duration
	// Margin stops admitting from a block this long before its window ends on
	// the database's clock (default DefaultAllotmentMargin, 100ms): the last
	// moments of a window are decided in the database, which counts them in
	// the right window whatever this host's clock says. The database's clock
	// is estimated from its readings (each block taken, and the report of open
	// blocks every second) plus the time elapsed on this host since: a step of
	// the database's clock (NTP, a failover to a host whose clock differs)
	// reaches the estimate within about a second, while this process holds a
	// block. A block admits only while the estimate is within its window: one
	// whose window the database's clock stepped back before goes back as if
	// its window had ended. While it holds no block the estimate only decides
	// whether to take one, and taking one reads the clock anew. A Local limit
	// whose window is not longer than Margin (a Margin of a second or more and
	// a one-second window) would never admit from a block: it is decided in
	// the database on every request, as if it were not Local, taking no block.
	Margin time.Duration
}

// Defaults of AllotmentOptions.
const (
	DefaultAllotmentMaxShare  = 1.0 / 16
	DefaultAllotmentHorizon   = time.Second
	DefaultAllotmentIdleAfter = 2 * time.Second
	DefaultAllotmentMargin    = 100 * time.Millisecond
)

// WithAllotments sets how blocks of Local limits are sized and timed.
func WithAllotments(o AllotmentOptions) Option {
	return func(opts *options) { opts.allot = o }
}

func (o AllotmentOptions) withDefaults() AllotmentOptions {
	// A holder the database refuses would fail every block taken: Local
	// limits would silently all be decided in the database, a failed
	// statement more per request. One of megabytes would be written to
	// every block's row.
	o.Holder = runecut.Text(o.Holder, MaxScopeBytes)
	if o.Holder == "" {
		o.Holder = newHolder()
	}
	switch {
	case o.MaxShare > 1:
		o.MaxShare = 1 // a block of the whole limit: what was asked for comes closest
	case !(o.MaxShare > 0): // NaN too
		o.MaxShare = DefaultAllotmentMaxShare
	}
	if o.Horizon <= 0 {
		o.Horizon = DefaultAllotmentHorizon
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = DefaultAllotmentIdleAfter
	}
	if o.Margin <= 0 {
		o.Margin = DefaultAllotmentMargin
	}
	return o
}
