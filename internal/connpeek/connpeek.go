// Package connpeek tells whether an idle connection's peer has already sent
// something or closed it, without blocking and without reading or sending
// anything: on a database connection nobody is using, either means the
// session is not what it was (the server ended it, and said so).
package connpeek

import (
	"crypto/tls"
	"net"
	"syscall"
)

// Pending reports whether conn's socket has bytes waiting to be read, or
// its peer closed it, or the socket cannot be looked at (closed): a peek
// of one byte that leaves it unread. It is false when the socket has
// nothing to read, and when conn is no socket this package can look at (a
// net.Conn of a dialer of the caller's that is no syscall.Conn, or a
// system other than Linux, macOS, the BSDs or Solaris): nothing is known
// then.
//
// A *tls.Conn is looked at through the socket under it (its records are
// not read). What a reader already took off the socket into a buffer of
// its own is not seen.
func Pending(conn net.Conn) bool {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil { // closed
		return true
	}
	return peek(raw)
}
