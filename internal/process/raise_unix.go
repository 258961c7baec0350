//go:build unix

package process

import (
	"os"
	"syscall"
)

// Raise sends sig to this process, so that, its handler reset (signal.Reset), it takes its
// default course: for the signals that stop a program, the program ends as killed by sig.
func Raise(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), s)
	}
}
