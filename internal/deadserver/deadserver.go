// Package deadserver stands in for a database that fails: one whose host froze (it accepts
// connections and never answers) and one that is down (connecting is refused at once). The
// demo and the tests of the failure policies point pgx at them. Unlike the test helpers of
// internal/ (freezer.New, say), their constructors take no testing.TB: the demo, no test,
// starts them too. Each caller closes what it started (a test with t.Cleanup).
package deadserver

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/pgadmit/pgadmit/internal/connset"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// Hanging is a TCP server on 127.0.0.1 that accepts connections and never answers.
type Hanging struct {
	ln          net.Listener
	afterAccept func()      // a test's, between an Accept and keeping what it accepted
	conns       connset.Set // the connections held, and the accept loop (its only goroutine)
}

// Hang starts a Hanging server; Close stops it. One never closed holds its port, its
// connections and its accept loop until the process exits.
func Hang() (*Hanging, error) { return hang(func() {}) }

func hang(afterAccept func()) (*Hanging, error) {
	ln, err := net.Listen("tcp", pgcluster.Host+":0")
	if err != nil {
		return nil, err
	}
	h := &Hanging{ln: ln, afterAccept: afterAccept}
	h.conns.Go(h.hold)
	return h, nil
}

// hold accepts connections and keeps them open, unanswered, until Close. One that Accept
// returns once Close has begun (it took the connection before the listener closed) is closed
// at once: Close has already closed those kept.
func (h *Hanging) hold() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.afterAccept()
		if !h.conns.Keep(c) {
			return
		}
	}
}

// Addr is the server's host:port.
func (h *Hanging) Addr() string { return h.ln.Addr().String() }

// Close stops accepting and drops the connections held, one accepted meanwhile included,
// and returns once the accept loop has ended. Calling it again does nothing more.
func (h *Hanging) Close() {
	h.ln.Close()
	h.conns.Close()
}

// Stopped is a host:port on 127.0.0.1 where nothing listens: connecting is refused at once,
// as by the host of a database that is down. It holds its port until Close, with a socket
// bound to it that does not listen: a port found free and let go (as pgcluster.FreePort does)
// could be taken meanwhile by another process's server, whose answer a test expecting a
// refusal would get; and no outgoing connection is given it as its local port.
type Stopped struct {
	addr string
	once sync.Once
	fd   socket
}

// Stop returns a Stopped address; Close lets its port go. Call it once done with the address
// (a test: t.Cleanup(s.Close)): one never closed holds its port and a file descriptor until
// the process exits. Nothing closes it when it is garbage: its address may still be in use
// (a pool's config holds it, not the Stopped), and a port let go could be taken meanwhile.
func Stop() (*Stopped, error) {
	// Close-on-exec set under ForkLock, as the net package does: a child started meanwhile
	// (pg_ctl, say) must not inherit the socket, and hold the port after Close.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	ip, err := netip.ParseAddr(pgcluster.Host)
	if err != nil || !ip.Is4() {
		syscall.Close(fd)
		return nil, fmt.Errorf("deadserver: host %q: not an IPv4 address", pgcluster.Host)
	}
	// Not listening, the socket takes no connection: the kernel refuses them. Without
	// SO_REUSEADDR, no other socket may bind the port while it is open.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ip.As4()}); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return &Stopped{addr: net.JoinHostPort(pgcluster.Host, strconv.Itoa(port)), fd: fd}, nil
}

// Addr is the stopped server's host:port.
func (s *Stopped) Addr() string { return s.addr }

// Close lets the port go. Calling it again does nothing more.
func (s *Stopped) Close() { s.once.Do(func() { syscall.Close(s.fd) }) }
