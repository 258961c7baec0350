//go:build !windows

package deadserver

// socket is what syscall.Socket returns: a file descriptor.
type socket = int
