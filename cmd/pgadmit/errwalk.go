package main

// eachError calls visit with every error of type T in err's tree, however joined and wrapped,
// in order, without looking inside one it found: errors.As finds only the first.
func eachError[T error](err error, visit func(T)) {
	if t, ok := err.(T); ok {
		visit(t)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			eachError(e, visit)
		}
	case interface{ Unwrap() error }:
		eachError(u.Unwrap(), visit)
	}
}
