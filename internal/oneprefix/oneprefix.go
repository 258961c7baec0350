// Package oneprefix writes the errors of pgadmit's other packages (httpadmit, promadmit,
// schema) that wrap an error of package ratelimit, a *ratelimit.ValidationError mostly, so that
// their message names one package: "schema: invalid pool (<nil>): must be a pool, not nil", not
// "schema: ratelimit: invalid pool ...". Package ratelimit's own errorf uses it too, for a
// message of its own that wraps one of its errors.
package oneprefix

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ratelimitPrefix starts the message of every error of package ratelimit.
const ratelimitPrefix = "ratelimit: "

// Errorf is fmt.Errorf, an error among args whose message starts "ratelimit: " written without
// it. format names the caller's package first, itself ("schema: %w") or in the error it
// starts with ("%w: %w" after httpadmit.ErrInvalidLimit, "httpadmit: invalid limit"). It wraps
// what fmt.Errorf's %w wraps, the errors themselves: errors.As and errors.Is find them as before.
func Errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	var shown []any
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil && strings.HasPrefix(e.Error(), ratelimitPrefix) {
			if shown == nil {
				shown = slices.Clone(args)
			}
			shown[i] = unprefixed{e}
		}
	}
	if shown == nil {
		return err
	}
	msg := fmt.Errorf(format, shown...).Error()
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return &wrapped{msg: msg, err: u.Unwrap()}
	case interface{ Unwrap() []error }:
		return &wrappedJoined{msg: msg, errs: u.Unwrap()}
	}
	return errors.New(msg)
}

// unprefixed is err written without its "ratelimit: ", for fmt (%w or %v alike).
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), ratelimitPrefix) }

// wrapped and wrappedJoined are Errorf's errors, fmt.Errorf's with one %w and with several,
// with the message written with the package named once.
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }

type wrappedJoined struct {
	msg  string
	errs []error
}

func (e *wrappedJoined) Error() string   { return e.msg }
func (e *wrappedJoined) Unwrap() []error { return e.errs }
