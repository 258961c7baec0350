//go:build unix

package process

import (
	"errors"
	"syscall"
)

// Gone reports whether no process has the id pid (kill(pid, 0) fails with ESRCH). A process of
// another user, which this one may not signal, is not gone.
func Gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// Terminate asks (SIGTERM) process pid, which need not be a child of this process, to end.
func Terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }
