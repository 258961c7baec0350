// Package deadserver stands in for a database that fails: one whose host froze (it accepts
// connections and never answers) and one that is down (connecting is refused at once). The
// demo and the tests of the failure policies point pgx at them.
package deadserver

import (
	"net"
	"strconv"
	"sync"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// Hanging is a TCP server on 127.0.0.1 that accepts connections and never answers.
type Hanging struct {
	ln          net.Listener
	afterAccept func()        // a test's, between an Accept and keeping what it accepted
	held        chan struct{} // closed when hold returns
	mu          sync.Mutex
	closed      bool // under mu: Close has begun; hold closes what it accepts
	conns       []net.Conn
}

// Hang starts a Hanging server; Close stops it.
func Hang() (*Hanging, error) { return hang(func() {}) }

func hang(afterAccept func()) (*Hanging, error) {
	ln, err := net.Listen("tcp", pgcluster.Host+":0")
	if err != nil {
		return nil, err
	}
	h := &Hanging{ln: ln, afterAccept: afterAccept, held: make(chan struct{})}
	go h.hold()
	return h, nil
}

// hold accepts connections and keeps them open, unanswered, until Close. One that Accept
// returns once Close has begun (it took the connection before the listener closed) is closed
// at once: Close has already closed those kept.
func (h *Hanging) hold() {
	defer close(h.held)
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.afterAccept()
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			c.Close()
			return
		}
		h.conns = append(h.conns, c)
		h.mu.Unlock()
	}
}

// Addr is the server's host:port.
func (h *Hanging) Addr() string { return h.ln.Addr().String() }

// Close stops accepting and drops the connections held, one accepted meanwhile included,
// and returns once the accept loop has ended. Calling it again does nothing more.
func (h *Hanging) Close() {
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	h.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	<-h.held
}

// Stopped returns a host:port on 127.0.0.1 where nothing listens (it was free a moment ago).
func Stopped() (string, error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(pgcluster.Host, strconv.Itoa(port)), nil
}
