//go:build !unix

package process

import "os"

// Raise does nothing off Unix, where a process cannot send itself a signal: the caller ends the
// process itself (os.Exit) when it must.
func Raise(os.Signal) {}
