package ratelimit

import (
	"time"

	"github.com/pgadmit/pgadmit/internal/textcell"
)

// Metric names with a meaning of their own. Any other name (requests,
// tokens, cost...) is a fixed-window counter.
const (
	// MetricConcurrent limits requests in flight: each admission takes a
	// lease that counts until it is released or expires.
	MetricConcurrent = "concurrent"
	// MetricQueueSize limits how many unfinished tasks a scope may hold. It is
	// enforced when a task is created (CreateTask), not by Reserve.
	MetricQueueSize = "queue_size"
	// MetricRequests and MetricTokens are the usual window counters.
	MetricRequests = "requests"
	MetricTokens   = "tokens"
)

// Scope is what a limit applies to: an API key, a team, a model, an
// upstream account... Type and Key identify it.
type Scope struct {
	// Type is the kind of scope ("api_key", "team", "model"), chosen by the
	// caller: with Key it names the counters and leases of the scope. Not
	// blank, valid UTF-8 without NUL bytes, at most MaxScopeBytes bytes
	// (Limit.Validate). It is configuration: package promadmit takes it as
	// a label value.
	Type string
	// Key is which one of its Type (an API key's id, a team's name), under
	// the same rules. Never a label value.
	Key string
	// Name and Metadata are not stored: they are copied into an
	// ExceededError (ScopeName, ScopeMetadata) for messages and logs.
	Name     string
	Metadata map[string]any
}

// text shows the scope in an error's message as Doctor and inspect show it
// (textcell.Scope): api_key:abc as it is, a type with a ":" and text with a
// space or that does not print quoted, so that no two scopes read alike.
func (s Scope) text() string { return textcell.Scope(s.Type, s.Key) }

// Limit is one limit an admission must fit in.
//
// Zero values, for Check and Reserve: an Amount of 0 reserves nothing, so
// the limit is skipped (it is validated, but no row is read or written,
// and the grant holds nothing for it). A Limit of 0 admits nothing: any
// positive Amount is refused with an *ExceededError that is not Retryable.
//
// A queue_size limit, in TaskSpec.QueueLimits, is not skipped at Amount 0:
// there Amount is ignored (0 or 1), every task takes one place and the
// limit is enforced.
type Limit struct {
	// Scope is what the limit applies to.
	Scope Scope
	// Metric is what it counts: MetricConcurrent for slots held by leases,
	// MetricQueueSize for a queue's places (TaskSpec.QueueLimits), any
	// other name a counter over Window. Text as for Scope.Type.
	Metric string
	// Limit is the capacity of the window, of concurrent slots, or of a
	// queue's places.
	Limit float64
	// Amount is what this admission needs: 1 request, an estimate of
	// tokens, 1 slot. On a concurrent limit it is the lease's weight: a
	// request may hold 2.5 slots or half of one, and the live leases'
	// weights never sum past Limit. 0 skips the limit in Check and
	// Reserve (nothing is checked or held). In TaskSpec.QueueLimits it
	// must be 0 or 1 and changes nothing: the task takes one place and
	// the limit is enforced either way.
	Amount float64
	// Window is the fixed window of a counter metric, in whole seconds,
	// aligned to the Unix epoch. Zero means DefaultWindow.
	Window time.Duration
	// LeaseTTL is how long a concurrent lease lives without renewal, in
	// whole seconds. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Policy is a free label reported back in errors.
	Policy string
	// Local admits this window limit from a block of its window's units
	// that the Limiter takes in advance (an allotment), in memory, with no
	// round trip to the database. Blocks are recorded in
	// gateway_rate_limit_allotments and reserved in the window's counter,
	// so the limit stays exact across processes. See the package
	// documentation, "Local allotments". Window limits only: a
	// concurrent limit, or a queue_size one of TaskSpec.QueueLimits, with
	// Local set is a *ValidationError. Ignored inside a caller's
	// transaction, on a Limiter made from a single connection (*pgx.Conn,
	// *pgxpool.Conn, or a type of one's own that embeds one), and for a
	// Window not longer than
	// AllotmentOptions.Margin (a block stops admitting Margin before its
	// window ends, so it would admit nothing). A Reserve for a task whose
	// limits were all admitted from blocks reads the task and attempt
	// (one statement that locks nothing), fenced as any Reserve is.
	Local bool
}

// Grant is what an admission holds: one reservation per window limit and
// one lease per concurrent limit. Pass it to Commit or Release.
type Grant struct {
	// TaskID and AttemptID are the task and attempt (UUIDs) the admission
	// is for, as Reserve was given them or Attach linked it; empty when
	// none.
	TaskID    string
	AttemptID string
	// Reservations and Leases are what it holds (none for a limit of
	// Amount 0).
	Reservations []Reservation
	Leases       []Lease
	// DecidedAt is the database's clock when the admission was decided:
	// ResetAt minus DecidedAt is the time left in a window on that clock,
	// whatever this host's clock says. For an admission from Local blocks
	// alone it is this process's estimate of that clock
	// (AllotmentOptions.Margin says how it is kept); zero for an admission
	// with nothing to reserve.
	DecidedAt time.Time
}

// Empty reports whether the grant holds nothing.
func (g Grant) Empty() bool { return len(g.Reservations) == 0 && len(g.Leases) == 0 }

// Reservation is an amount held in one window counter.
type Reservation struct {
	// ID is its row in gateway_rate_limit_reservations (a UUID); empty
	// for a Local reservation.
	ID string
	// ScopeType, ScopeKey and Metric name its counter, as the Limit did.
	ScopeType string
	ScopeKey  string
	Metric    string
	// Window is the limit's window; WindowStart and ResetAt bound the
	// window it was counted in, on the database's clock.
	Window      time.Duration
	WindowStart time.Time
	ResetAt     time.Time
	// Limit is the limit it was admitted under, and Amount what it holds.
	Limit  float64
	Amount float64
	// Remaining is what the window had left right after this admission
	// (Limit minus used, reserved and this Amount), as the admission saw it.
	// For a Local reservation, what its block had left when read just after
	// the admission: admissions from the same block by other goroutines in
	// between count in it too (reading it under the admission's own hold of
	// the block's lock slowed admissions from blocks by 4-9 %).
	Remaining float64
	// Local is true for a reservation taken from a local allotment (Limit.
	// Local): it has no row and no ID; Allotment names its block.
	Local     bool
	Allotment string
	// LocalID names a Local reservation to the Limiter that admitted it,
	// which settles it by this name from a copy of the grant (one decoded
	// from JSON) until its block is returned (or left to Recover by a Close
	// that could not return it); any other Limiter reports it
	// StatusUnknown, and so does this one for a copy of an admission
	// already settled once its block admits no more (spent, or its window
	// ended). It is the Limiter's random instance id, a sequence
	// and a random tag (the holder of one grant cannot name another).
	LocalID string `json:",omitempty"`

	local *localAdmission // set on Local reservations
	index int             // the limit's position in the caller's slice
}

// Lease is a held concurrency slot: the lease of a concurrent limit. A
// task's execution lease (Task.LeaseExpiresAt, HeartbeatTask) and a
// Recover or Prune run's lease (WithMaintenanceLeaseTTL) are other things.
type Lease struct {
	// ID is its row in gateway_concurrency_leases (a UUID, as
	// "123e4567-e89b-12d3-a456-426614174000"), which RenewLeases,
	// ReleaseLeases, Commit and Release name it by.
	ID string
	// ScopeType and ScopeKey name the scope whose slots it holds, as the
	// Limit did.
	ScopeType string
	ScopeKey  string
	// Amount is the slots it holds (the Limit's Amount, its weight), and
	// Limit the limit it was taken under.
	Amount float64
	Limit  float64
	// TTL is the lease's time to live, as taken (DefaultLeaseTTL when the
	// Limit's LeaseTTL was zero); RenewLeases extends the lease by it
	// (by DefaultLeaseTTL when it is zero) and returns the TTL it used.
	TTL time.Duration
	// ExpiresAt is when the lease lapses unless renewed, on the database's
	// clock.
	ExpiresAt time.Time
	// Remaining is how many slots the scope had free right after this
	// admission (Limit minus live leases and this Amount).
	Remaining float64
}
