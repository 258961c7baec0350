package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/textcell"
)

// Bounds of what validation accepts.
const (
	// MaxWindow bounds Limit.Window.
	MaxWindow = 366 * 24 * time.Hour
	// MaxLeaseTTL bounds Limit.LeaseTTL and the execution lease of a task
	// (TaskSpec.LeaseTTL, ClaimTask, HeartbeatTask).
	MaxLeaseTTL = 24 * time.Hour
	// MaxLimitsPerCall bounds the limits of one Check or Reserve and the
	// QueueLimits of one CreateTask.
	MaxLimitsPerCall = 64
	// MaxAmount bounds every limit, amount and actual amount: far above any
	// real token or request count, and low enough that the sums a window
	// accumulates stay exact and convertible to float64.
	MaxAmount = 1e15
	// MinAmount is the smallest amount, limit or actual amount above zero
	// (zero itself is fine). Amounts are stored as numeric, exactly as
	// their shortest decimal form: 1e-300 would be a 300-digit number in
	// every sum it joins. Between MinAmount and MaxAmount a float64 needs
	// at most 25 digits after the decimal point, so every stored amount and
	// every sum of them does too.
	MinAmount = 1e-9
	// MaxScopeBytes bounds a scope's Type and Key and a limit's Metric, in
	// bytes of UTF-8.
	MaxScopeBytes = 512
	// MaxReasonBytes bounds the reason recorded on released reservations
	// and leases.
	MaxReasonBytes = 512
	// MaxPayloadBytes bounds a JSON document a task stores: TaskSpec.Payload,
	// Event.Payload and Outcome.Error. It keeps every accepted document
	// within what jsonb can hold: the densest JSON (an array of 0s) grows
	// about sixfold into jsonb, so 16 MiB becomes about 100 MB, while 80 MB
	// of it fails on the server with a raw "invalid memory alloc request
	// size". The bound also counts every digit of a number as jsonb writes
	// it out when it gives the document back (1e131071 is 131072
	// digits): 90 kB of such numbers came back as over a gigabyte, a raw
	// "out of memory" for every statement that returned them.
	MaxPayloadBytes = 16 << 20
)

// windowLimit is a validated window-counter limit with its position in the
// caller's slice.
type windowLimit struct {
	index         int
	Limit         Limit
	windowSeconds int32
}

// leaseLimit is a validated concurrent limit with its position in the
// caller's slice.
type leaseLimit struct {
	index      int
	Limit      Limit
	ttlSeconds int32
}

// splitLimits validates every limit and sorts them into window counters and
// concurrency leases, skipping those with a zero Amount. Nothing is written
// anywhere when it fails.
func splitLimits(limits []Limit) ([]windowLimit, []leaseLimit, error) {
	if len(limits) > MaxLimitsPerCall {
		return nil, nil, &ValidationError{Field: "Limits", Value: len(limits), Reason: fmt.Sprintf("at most %d limits per call", MaxLimitsPerCall)}
	}
	var windows []windowLimit
	var leases []leaseLimit
	seen := make(map[limitKey]int, len(limits))
	for i, l := range limits {
		if err := inElement("Limits", i, l.Validate()); err != nil {
			return nil, nil, err
		}
		window := l.Window
		if window == 0 {
			window = DefaultWindow
		}
		ttl := l.LeaseTTL
		if ttl == 0 {
			ttl = DefaultLeaseTTL
		}
		key := limitKey{l.Scope.Type, l.Scope.Key, l.Metric, window}
		if l.Metric == MetricConcurrent {
			key.window = 0 // a concurrency limit has no window: one per scope
		}
		if j, dup := seen[key]; dup {
			return nil, nil, &ValidationError{Field: fmt.Sprintf("Limits[%d]", i), Value: shown(l.Scope.text() + " " + textcell.Show(l.Metric)),
				Reason: fmt.Sprintf("same scope, metric and window as Limits[%d]", j)}
		}
		seen[key] = i
		if l.Amount == 0 {
			continue
		}
		if l.Metric == MetricConcurrent {
			leases = append(leases, leaseLimit{index: i, Limit: l, ttlSeconds: int32(ttl / time.Second)})
		} else {
			windows = append(windows, windowLimit{index: i, Limit: l, windowSeconds: int32(window / time.Second)})
		}
	}
	return windows, leases, nil
}

// Validate reports whether Check and Reserve would accept the limit on its
// own, as a *ValidationError (errors.Is ErrInvalidInput) whose Field is
// relative to the limit ("Amount"); nil when they would. It reads nothing
// and allocates nothing for a valid limit: a caller that builds limits from
// configuration can check them once, and a caller that must not fail a
// request for a limit that only observes (a shadow limit) can set a bad one
// aside.
func (l Limit) Validate() error {
	if err := validateText("Scope.Type", l.Scope.Type); err != nil {
		return err
	}
	if err := validateText("Scope.Key", l.Scope.Key); err != nil {
		return err
	}
	if err := validateText("Metric", l.Metric); err != nil {
		return err
	}
	if l.Metric == MetricQueueSize {
		return &ValidationError{Field: "Metric", Value: shown(l.Metric),
			Reason: "queue_size limits are enforced when a task is created (Limiter.CreateTask), not by Check or Reserve"}
	}
	if l.Local && l.Metric == MetricConcurrent {
		return &ValidationError{Field: "Local", Value: true,
			Reason: "only window limits can be admitted from local allotments; concurrent limits are always decided in the database"}
	}
	if err := validateAmount("Limit", l.Limit); err != nil {
		return err
	}
	if err := validateAmount("Amount", l.Amount); err != nil {
		return err
	}
	if err := validateSeconds("Window", l.Window, MaxWindow); err != nil {
		return err
	}
	return validateSeconds("LeaseTTL", l.LeaseTTL, MaxLeaseTTL)
}

// inElement names the element of a list that a validation error is about:
// field "Amount" of element 2 of "Limits" becomes "Limits[2].Amount", and
// an error about no field in particular becomes "Limits[2]". The name is
// built only for a failure, so that validating a valid input allocates
// nothing. Other errors, and nil, are returned as they are.
func inElement(list string, i int, err error) error {
	if err == nil {
		return nil
	}
	return within(list+"["+strconv.Itoa(i)+"]", err)
}

// within names a validation error's field as a part of whole: "Amount"
// within "Limits[2]" is "Limits[2].Amount"; an error about no field in
// particular is about whole. Other errors, and nil, are returned as they are.
func within(whole string, err error) error {
	var v *ValidationError
	if !errors.As(err, &v) {
		return err
	}
	field := whole
	if v.Field != "" {
		field += "." + v.Field
	}
	return &ValidationError{Field: field, Value: v.Value, Reason: v.Reason}
}

// limitKey identifies what a limit counts: no two limits of one call may
// share one.
type limitKey struct {
	scopeType, scopeKey, metric string
	window                      time.Duration
}

// validateText accepts a non-blank (not only white space), bounded, valid
// UTF-8 string without NUL bytes (PostgreSQL text cannot hold NUL).
func validateText(field, s string) error {
	if strings.TrimSpace(s) == "" {
		return &ValidationError{Field: field, Value: shown(s), Reason: "must not be empty or white space only"}
	}
	return validateOptionalText(field, s, MaxScopeBytes)
}

// shown is how a *ValidationError shows text it refused: quoted, so that
// no newline, NUL byte or invalid UTF-8 of the caller's reaches a log raw,
// and cut to its first 60 characters, so that a megabyte of it does not
// either.
func shown(s string) string { return fmt.Sprintf("%.60q", s) }

// validateReason accepts the reason Release and ReleaseLeases record: ""
// or valid UTF-8 without NUL bytes, at most MaxReasonBytes.
func validateReason(reason string) error {
	return validateOptionalText("reason", reason, MaxReasonBytes)
}

// validateOptionalText accepts "" or a valid UTF-8 string without NUL
// bytes (PostgreSQL text cannot hold NUL) of at most maxBytes bytes.
func validateOptionalText(field, s string, maxBytes int) error {
	switch {
	case s == "":
		return nil
	case len(s) > maxBytes:
		return &ValidationError{Field: field, Value: fmt.Sprintf("%d bytes", len(s)), Reason: fmt.Sprintf("must be at most %d bytes", maxBytes)}
	case !utf8.ValidString(s):
		return &ValidationError{Field: field, Value: shown(s), Reason: "must be valid UTF-8"}
	case strings.IndexByte(s, 0) >= 0:
		return &ValidationError{Field: field, Value: shown(s), Reason: "must not contain NUL bytes"}
	}
	return nil
}

// ValidateAmount reports whether Reserve, Commit and CreateTask accept v as
// an amount (a limit, an estimate, an actual amount): zero, or a finite
// number from MinAmount up to MaxAmount. It returns nil or a
// *ValidationError (errors.Is ErrInvalidInput) whose Field is empty, for
// the caller to name: a layer that takes amounts before Commit (an HTTP
// handler's reported usage, say) can refuse what Commit would.
func ValidateAmount(v float64) error { return validateAmount("", v) }

// validateAmount accepts zero, or a finite number from MinAmount up to
// MaxAmount.
func validateAmount(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return &ValidationError{Field: field, Value: v, Reason: "must be a finite number"}
	case v < 0:
		return &ValidationError{Field: field, Value: v, Reason: "must not be negative"}
	case v > MaxAmount:
		return &ValidationError{Field: field, Value: v, Reason: "must be at most " + amounttext.Full(MaxAmount)}
	case v > 0 && v < MinAmount:
		return &ValidationError{Field: field, Value: v, Reason: "must be zero or at least " + amounttext.Full(MinAmount)}
	}
	return nil
}

// validateTimestamp accepts a time that PostgreSQL's timestamptz holds
// (4713 BC to 294276 AD) and pgx can send: pgx writes a time as
// microseconds since 1970 in an int64, which overflows from 10 January
// 294247 on, and the time then sent is another one. The bounds here are
// whole years inside both.
func validateTimestamp(field string, t time.Time) error {
	if t.Before(minTimestamp) || !t.Before(endTimestamp) {
		return &ValidationError{Field: field, Value: t, Reason: "must be a time PostgreSQL can hold and pgx can send (4713 BC to 294246 AD)"}
	}
	return nil
}

var (
	minTimestamp = time.Date(-4712, time.January, 1, 0, 0, 0, 0, time.UTC) // 4713 BC
	endTimestamp = time.Date(294247, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// validateSeconds accepts zero (the default) or a whole number of seconds up
// to max.
func validateSeconds(field string, d, max time.Duration) error {
	switch {
	case d < 0:
		return &ValidationError{Field: field, Value: d, Reason: "must not be negative (zero means the default)"}
	case d%time.Second != 0:
		return &ValidationError{Field: field, Value: d, Reason: "must be a whole number of seconds"}
	case d > max:
		return &ValidationError{Field: field, Value: d, Reason: fmt.Sprintf("must be at most %s", max)}
	}
	return nil
}
