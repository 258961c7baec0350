package errwalk

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// node is an error that may wrap another.
type node struct {
	name string
	err  error
}

func (n *node) Error() string { return n.name }
func (n *node) Unwrap() error { return n.err }

// Each finds every error of its type, in order, through joins and wraps, and does not look
// inside one it found.
func TestEachFindsEveryErrorOfItsTypeInOrder(t *testing.T) {
	err := errors.Join(
		fmt.Errorf("wrapped: %w", &node{name: "a"}),
		errors.New("other"),
		fmt.Errorf("two: %w and %w", &node{name: "b"}, errors.Join(&node{name: "c"})),
		&node{name: "d", err: &node{name: "inside d"}},
	)
	var names []string
	Each(err, func(n *node) { names = append(names, n.name) })
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(names, want) {
		t.Errorf("Each found %q, want %q", names, want)
	}
	Each(nil, func(*node) { t.Error("Each visited an error in nil") })
}
