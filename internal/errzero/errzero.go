// Package errzero checks, for the tests of a package, that its exported
// error types hold up when a caller makes one by hand: the zero value, or
// one without the error it wraps, says something in Error, and Error,
// Unwrap, errors.Is and errors.As do not panic on it.
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

// Case is an error value to check.
type Case struct {
	// Name is how the test names it ("StepError{}").
	Name string
	// Err is the value, a pointer to an exported error type.
	Err error
	// Is are the sentinels it matches (errors.Is), wrapped or not.
	Is []error
}

// Check checks each case: Error does not panic and says something, Unwrap
// (either form) does not panic, and errors.Is and errors.As find the
// error, and its sentinels, through a wrapper and a join. (fmt recovers a
// panic of Error and prints it, so Error is called first, on its own.)
func Check(t *testing.T, cases []Case) {
	t.Helper()
	for _, c := range cases {
		msg, panicked := call(func() any { return c.Err.Error() })
		if panicked != nil {
			t.Errorf("%s.Error() panicked: %v", c.Name, panicked)
			continue
		}
		if msg == "" {
			t.Errorf("%s.Error() is empty", c.Name)
		}
		switch u := c.Err.(type) {
		case interface{ Unwrap() error }:
			if _, p := call(func() any { return u.Unwrap() }); p != nil {
				t.Errorf("%s.Unwrap() panicked: %v", c.Name, p)
				continue
			}
		case interface{ Unwrap() []error }:
			if _, p := call(func() any { return u.Unwrap() }); p != nil {
				t.Errorf("%s.Unwrap() panicked: %v", c.Name, p)
				continue
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
		v := reflect.ValueOf(c.Err)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().IsZero() {
			zeros = append(zeros, v.Elem().Type().Name())
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

// call calls f, and returns what it returned, or what it panicked with.
func call(f func() any) (out any, panicked any) {
	defer func() { panicked = recover() }()
	return f(), nil
}
