// Package errzero checks, for the tests of a package, that its exported
// error types hold up when a caller makes one by hand: the zero value, or
// one without the error it wraps, says something in Error (no "<nil>", no
// empty part), and Error, Unwrap, errors.Is and errors.As do not panic on
// it.
package errzero

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// MessageFlaw says what is wrong with msg, an error's message, as a reader
// sees it, or returns "" when nothing is: empty, "<nil>" (an unset error
// or value printed with %v), or an empty part that an unset field left (a
// trailing or doubled separator, empty parentheses). A field made by hand
// may be empty; its message should then leave it out, not print a hole.
func MessageFlaw(msg string) string {
	switch {
	case msg == "":
		return "empty"
	case strings.Contains(msg, "<nil>"):
		return `says "<nil>"`
	case strings.TrimSpace(msg) != msg:
		return "starts or ends with a space"
	case strings.HasPrefix(msg, ":") || strings.HasSuffix(msg, ":"):
		return "starts or ends with a colon"
	case strings.Contains(msg, "  "):
		return "has an empty part (two spaces)"
	case strings.Contains(msg, ": :"):
		return "has an empty part (two colons)"
	case strings.Contains(msg, "()"), strings.Contains(msg, "( "), strings.Contains(msg, " )"):
		return "has empty parentheses"
	}
	return ""
}

// Case is an error value to check.
type Case struct {
	// Name is how the test names it ("StepError{}").
	Name string
	// Err is the value, a pointer to an exported error type.
	Err error
	// Is are the sentinels it matches (errors.Is), wrapped or not.
	Is []error
}

// Check checks each case: Error does not panic and says something without
// a hole (MessageFlaw), Unwrap (either form) does not panic and gives
// nothing for a zero value, and errors.Is and errors.As find the error,
// and its sentinels, through a wrapper and a join. (fmt recovers a panic
// of Error and prints it, so Error is called first, on its own.)
func Check(t *testing.T, cases []Case) {
	t.Helper()
	for _, c := range cases {
		msg, panicked := call(func() any { return c.Err.Error() })
		if panicked != nil {
			t.Errorf("%s.Error() panicked: %v", c.Name, panicked)
			continue
		}
		if flaw := MessageFlaw(msg.(string)); flaw != "" {
			t.Errorf("%s.Error() = %q: %s", c.Name, msg, flaw)
		}
		zero := zeroValue(c.Err)
		switch u := c.Err.(type) {
		case interface{ Unwrap() error }:
			inner, p := call(func() any { return u.Unwrap() })
			if p != nil {
				t.Errorf("%s.Unwrap() panicked: %v", c.Name, p)
				continue
			}
			if zero && inner != nil {
				t.Errorf("%s.Unwrap() = %v, want nil", c.Name, inner)
			}
		case interface{ Unwrap() []error }:
			inner, p := call(func() any { return u.Unwrap() })
			if p != nil {
				t.Errorf("%s.Unwrap() panicked: %v", c.Name, p)
				continue
			}
			if zero && len(inner.([]error)) != 0 {
				t.Errorf("%s.Unwrap() = %v, want none", c.Name, inner)
			}
		}
		for _, err := range []error{c.Err, fmt.Errorf("wrapped: %w", c.Err), errors.Join(errors.New("other"), c.Err)} {
			_, p := call(func() any {
				t.Helper()
				for _, s := range c.Is {
					if !errors.Is(err, s) {
						t.Errorf("%s: errors.Is(%q, %v) = false", c.Name, err, s)
					}
				}
				if errors.Is(err, context.Canceled) || errors.Is(err, errUnrelated) {
					t.Errorf("%s: errors.Is(%q, ...) matches an error it does not hold", c.Name, err)
				}
				target := reflect.New(reflect.TypeOf(c.Err))
				if !errors.As(err, target.Interface()) || target.Elem().Interface() != c.Err {
					t.Errorf("%s: errors.As(%q) does not find it", c.Name, err)
				}
				return nil
			})
			if p != nil {
				t.Errorf("%s: errors.Is or errors.As panicked: %v", c.Name, p)
			}
		}
	}
}

// errUnrelated is an error no case holds.
var errUnrelated = errors.New("errzero: unrelated")

// Covers checks that cases hold the zero value of every exported error
// type of the package in dir (named ...Error, as gosrc.ErrorTypeDocs finds
// them), so that a type added later is checked too.
func Covers(t *testing.T, dir string, cases []Case) {
	t.Helper()
	docs, err := gosrc.ErrorTypeDocs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var zeros []string
	for _, c := range cases {
		if zeroValue(c.Err) {
			zeros = append(zeros, reflect.TypeOf(c.Err).Elem().Name())
		}
	}
	var missing []string
	for name := range docs {
		if !slices.Contains(zeros, name) {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no case of the zero value of %s", strings.Join(missing, ", "))
	}
	if len(docs) == 0 {
		t.Errorf("found no exported error type in %s", dir)
	}
}

// zeroValue reports whether err points to the zero value of its type.
func zeroValue(err error) bool {
	v := reflect.ValueOf(err)
	return v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().IsZero()
}

// call calls f, and returns what it returned, or what it panicked with.
func call(f func() any) (out any, panicked any) {
	defer func() { panicked = recover() }()
	return f(), nil
}
