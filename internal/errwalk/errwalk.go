// Package errwalk walks the tree of an error (errors.Join, fmt.Errorf with
// several %w): errors.As finds only the first error of a type, and a run
// of several steps returns one per step.
package errwalk

// Each calls visit with every error of type T in err's tree, however joined
// and wrapped, in order, without looking inside one it found.
func Each[T error](err error, visit func(T)) {
	if t, ok := err.(T); ok {
		visit(t)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			Each(e, visit)
		}
	case interface{ Unwrap() error }:
		Each(u.Unwrap(), visit)
	}
}
