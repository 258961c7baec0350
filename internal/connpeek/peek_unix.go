//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris

package connpeek

import "syscall"

// peek is one recvfrom(2) of a byte with MSG_PEEK|MSG_DONTWAIT: EAGAIN is
// a quiet socket; a byte, EOF (0) or any other error is not. It runs under
// RawConn.Control, not RawConn.Read: Read takes the descriptor's read lock,
// which a read left blocked on the socket holds (pgconn's background
// reader, after a slow write, may leave one until the server next sends),
// and would wait for it; Control only keeps the descriptor open, and the
// peek does not wait either way.
func peek(raw syscall.RawConn) bool {
	var pending bool
	err := raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
	return err != nil || pending // err: the descriptor is closed
}
